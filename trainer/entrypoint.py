"""The container's entrypoint: pod env -> checked world -> preflight -> torchrun, re-joined if the world breaks up.

Usage (the container command): python -m trainer.entrypoint <what you would write after torchrun>
e.g. python -m trainer.entrypoint -m trainer.train smoke --epochs 2

torchrun runs as a child, not exec'd, for one case torchrun cannot handle: the loss of the
rendezvous store, which fails every torchrun that uses it with a connection error. Where the store
runs decides which pods see that:
- on pod 0 (static, and c10d whose RDZV_ENDPOINT is unset or MASTER_ADDR:MASTER_PORT): pod 0's
  agent hosts it, so when pod 0 is lost every other pod's torchrun fails. Those pods then wait for
  pod 0's replacement (the preflight again) and join the world it forms. Pod 0 never re-joins: it
  waits for nothing, its torchrun restarts its own workers when a peer is lost, and its failure is
  the run's (the Job counts it).
- apart (c10d whose RDZV_ENDPOINT is another address, python -m trainer.pod.rendezvous_store;
  etcd-v2's etcd likewise): no pod hosts it, and every pod, pod 0 included, waits for it in its
  preflight. A lost pod, pod 0 too, fails no other pod's torchrun: each restarts its workers and
  waits in the rendezvous, where the replacement joins. Only the store's own loss fails them;
  every pod then waits for the store to be back (the preflight again) and joins the world that
  forms anew around it.
A pod that may re-join does so at most MAX_RESTARTS times, instead of failing with the world.
Meanwhile its next torchrun is already started, with the same command line and env, holding back
until the preflight passes (its workers' fork server imports torch during the wait); a preflight
that ends otherwise discards it. A SIGTERM is passed on to torchrun, which gives the workers
SHUTDOWN_TIMEOUT to checkpoint; the pod then exits 143, which the Job replaces without counting as
a failure.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
from typing import Mapping, Sequence

from trainer import console
from trainer.lines import REJOINING, TORCHRUN_STARTED
from trainer.contract import EXIT_BAD_ENV, EXIT_PREFLIGHT_FAILED, EXIT_TERMINATED
from trainer.pod.launch import GO, SPARE_UNUSED, ArgsError, held_back, torchrun_argv, torchrun_env
from trainer.pod.liveness import answer_liveness_probes
from trainer.pod.preflight import preflight
from trainer.pod.env import resolve_world
from trainer.pod.env_reader import WorldError
from trainer.pod.pod_world import PodWorld

__all__ = ["PodWorld", "WorldError", "resolve_world", "torchrun_argv", "main"]


class Terminated(BaseException):  # not an Exception: nothing in the preflight may swallow it
    pass


class _Supervisor:
    """Turns SIGTERM into Terminated while no torchrun runs, and hands it to torchrun while one does."""

    def __init__(self) -> None:
        self.torchrun: subprocess.Popen | None = None
        self.terminated = False
        self._ahead: tuple[subprocess.Popen, list[str], dict[str, str]] | None = None

    def on_sigterm(self, signum: int, _frame) -> None:
        self.terminated = True
        if self.torchrun is not None and self.torchrun.poll() is None:
            self.torchrun.send_signal(signum)
        else:
            self.discard_ahead()
            raise Terminated(signal.Signals(signum).name)

    def start_ahead(self, argv: list[str], env: Mapping[str, str]) -> None:
        """Starts the torchrun of `argv` holding back (the agent's --await-start) until run() is
        called with the same command line and env; it ends by itself if this process does (the end
        of its stdin without a go). Its process group is its own, which its fork server shares."""
        held = subprocess.Popen(held_back(argv), env=dict(env), stdin=subprocess.PIPE, process_group=0)
        self._ahead = (held, argv, dict(env))

    def discard_ahead(self) -> None:
        """Kills the torchrun started ahead with its fork server, which would otherwise go on
        importing torch (seconds of CPU, more under load) before it noticed it was alone."""
        if self._ahead is not None:
            held = self._ahead[0]
            self._ahead = None
            try:
                os.killpg(held.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            held.wait()

    def run(self, argv: list[str], env: Mapping[str, str]) -> int:
        ahead = self._ahead
        if ahead is not None and ahead[1:] == (argv, dict(env)) and ahead[0].poll() is None:
            self._ahead = None
            self.torchrun = ahead[0]
            assert self.torchrun.stdin is not None
            self.torchrun.stdin.write(f"{GO}\n".encode())
            self.torchrun.stdin.close()
        else:
            self.discard_ahead()
            self.torchrun = subprocess.Popen(argv, env=dict(env))
        try:
            return self.torchrun.wait()
        finally:
            # A SIGTERM during the wait is passed on and the wait goes on; one that comes just as
            # torchrun has ended raises Terminated out of it, and torchrun is still reaped here.
            self.torchrun.wait()
            self.torchrun = None


def main(user_args: Sequence[str]) -> int:
    supervisor = _Supervisor()
    # As a container's PID 1 the process gets no default action for SIGTERM: without a handler, a
    # pod deleted while it waits for the master would sit out its whole grace period.
    signal.signal(signal.SIGTERM, supervisor.on_sigterm)
    try:
        code = _start(user_args, supervisor)
    except Terminated as stopped:
        console.line(f"[DDP] {stopped} while no torchrun ran: exiting", stream=sys.stderr)
        return EXIT_TERMINATED
    return EXIT_TERMINATED if supervisor.terminated and code != 0 else code


def _start(user_args: Sequence[str], supervisor: _Supervisor) -> int:
    env = dict(os.environ)
    try:
        world = resolve_world(env, socket.gethostname())
        torchrun_argv(world, user_args)  # refuse contradicting user args before waiting for anything
    except (WorldError, ArgsError) as exc:
        console.line(f"[DDP] cannot start: {exc}", stream=sys.stderr)
        return EXIT_BAD_ENV
    if world.liveness_port:  # from now on: the preflight's wait for the store can be long
        answer_liveness_probes(world.liveness_port)
    console.line(world.summary())
    for rule in (world.elastic_rule(), world.spare_rule()):
        if rule:
            console.line(rule)
    rejoins_left = 0 if world.hosts_rendezvous else world.max_restarts
    while True:
        checked = preflight(world, env, world.master_wait_timeout)
        for check in checked.checks:
            console.line(check.line())
        if checked.failed:
            supervisor.discard_ahead()
            console.line(f"[PREFLIGHT] not starting torchrun: {', '.join(checked.failed)} failed (see the 'next:' lines above)",
                         stream=sys.stderr)  # fmt: skip
            return EXIT_PREFLIGHT_FAILED
        argv = torchrun_argv(world, user_args, local_addr=checked.local_addr)
        console.line(f"{TORCHRUN_STARTED}{shlex.join(argv)}")
        run_env = {**torchrun_env(world, env), **checked.env}
        code = supervisor.run(argv, run_env)
        if code == SPARE_UNUSED and not supervisor.terminated:
            _wait_out_as_unused_spare()
        if code == 0 or supervisor.terminated or rejoins_left == 0:
            return code
        rejoins_left -= 1
        console.line(f"{REJOINING}: torchrun exited with {code}, the world broke up (its rendezvous store lost?); "
                     f"waiting for {world.rdzv_endpoint} to come back ({rejoins_left} re-joins left)")  # fmt: skip
        supervisor.start_ahead(argv, run_env)


def _wait_out_as_unused_spare() -> None:
    """The world this spare waited for ended. Exiting would tell the Job something untrue: a
    failure it counts, or a success that completes it whatever the world's end. Starting again
    could form a world of spares after the run. So the pod waits for its Job to end it (the Job
    ends at the world's first success, or fails with the world), and SIGTERM ends the wait."""
    console.line("[DDP] the world ended while this pod waited as a spare: waiting for its Job to end this pod")
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
