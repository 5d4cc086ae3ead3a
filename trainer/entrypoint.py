"""The container's entrypoint: pod env -> checked world -> preflight -> exec torchrun.

Usage (the container command): python -m trainer.entrypoint <what you would write after torchrun>
e.g. python -m trainer.entrypoint -m trainer.train smoke --epochs 2
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import sys
from typing import Sequence

from trainer.contract import EXIT_BAD_ENV, EXIT_PREFLIGHT_FAILED, EXIT_TERMINATED
from trainer.launch import ArgsError, torchrun_argv, torchrun_env
from trainer.preflight import preflight
from trainer.world import World, WorldError, resolve_world

__all__ = ["World", "WorldError", "resolve_world", "torchrun_argv", "main"]


class Terminated(BaseException):  # not an Exception: nothing in the preflight may swallow it
    pass


def _terminate(signum: int, _frame) -> None:
    raise Terminated(signal.Signals(signum).name)


def main(user_args: Sequence[str]) -> int:
    # As a container's PID 1 the process gets no default action for SIGTERM: without a handler, a
    # pod deleted while it waits for the master would sit out its whole grace period.
    signal.signal(signal.SIGTERM, _terminate)
    try:
        return _start(user_args)
    except Terminated as stopped:
        print(f"[DDP] {stopped} before torchrun started: exiting", file=sys.stderr, flush=True)
        return EXIT_TERMINATED


def _start(user_args: Sequence[str]) -> int:
    env = dict(os.environ)
    try:
        world = resolve_world(env, socket.gethostname())
        torchrun_argv(world, user_args)  # refuse contradicting user args before waiting for anything
    except (WorldError, ArgsError) as exc:
        print(f"[DDP] cannot start: {exc}", file=sys.stderr, flush=True)
        return EXIT_BAD_ENV
    print(world.summary(), flush=True)
    checked = preflight(world, env, world.master_wait_timeout)
    for check in checked.checks:
        print(check.line(), flush=True)
    if checked.failed:
        print(f"[PREFLIGHT] not starting torchrun: {', '.join(checked.failed)} failed (see the 'next:' lines above)",
              file=sys.stderr, flush=True)  # fmt: skip
        return EXIT_PREFLIGHT_FAILED
    argv = torchrun_argv(world, user_args, local_addr=checked.local_addr)
    print(f"[DDP] exec {shlex.join(argv)}", flush=True)
    # exec, so torchrun is the process Kubernetes signals and its exit status is the container's
    # (exec gives SIGTERM back its default action, and torchrun installs its own handler)
    os.execve(argv[0], argv, {**torchrun_env(world, env), **checked.env})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
