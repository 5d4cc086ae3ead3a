/*
 * The pod sandbox's process (the "pause" container) of the local test cluster: it holds the
 * pod's namespaces open and does nothing else. As PID 1 of the pod's PID namespace it reaps
 * every orphan re-parented to it, and it exits 0 on SIGTERM or SIGINT, so stopping a pod is
 * immediate. Built static (gcc -static -O2) by toolchain/images.sh, so the image holds this one file.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) {
  (void)sig;
  _exit(0);
}

static void reap(int sig) {
  int saved = errno;
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
  errno = saved;
}

static void on(int sig, void (*handler)(int), int flags) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = handler;
  sa.sa_flags = flags;
  sigemptyset(&sa.sa_mask);
  if (sigaction(sig, &sa, NULL) < 0) {
    perror("pause: sigaction");
    exit(1);
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "-v") == 0) {
    puts("pause (ddp-infra)");
    return 0;
  }
  if (getpid() != 1) {
    fprintf(stderr, "pause: warning: not PID 1, so orphans are not reaped here\n");
  }
  on(SIGINT, stop, 0);
  on(SIGTERM, stop, 0);
  on(SIGCHLD, reap, SA_NOCLDSTOP | SA_RESTART);
  reap(0); /* children that ended before the handler was installed */
  for (;;) {
    pause();
  }
  return 1; /* not reached */
}
