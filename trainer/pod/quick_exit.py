"""Leaving a process that imported torch without tearing its interpreter down.

At its exit, an interpreter that imported torch frees its modules object by object: 1 to 1.5
CPU-seconds, for memory the kernel takes back at once anyway (bench/bench_exit.py). Each world a
pod starts has an agent and a fork server that paid it (a pod of two workers took 17.0 CPU-seconds
from its start to its last process's end, and 12.3 without), and so did each store apart. The
agent and the store leave through `leave` with the status the interpreter would have given them;
the fork server, which the agent ends by going (its workers leave through os._exit already,
multiprocessing's way), through `flush_and_exit` (trainer/pod/fork_server.py).
"""

from __future__ import annotations

import atexit
import os
import sys
from typing import Callable, NoReturn, Sequence


def exit_status(main: Callable[[Sequence[str]], object], args: Sequence[str]) -> int:
    """Runs main(args) and gives the status `sys.exit(main(args))` would end with: the number main
    returned (0 for anything else), a SystemExit's code (its message printed, status 1, where it is
    not a number), 1 after an uncaught exception's traceback, 130 after an interrupt."""
    try:
        returned = main(args)
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0
        print(stop.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        sys.excepthook(*sys.exc_info())
        return 130
    except BaseException:
        sys.excepthook(*sys.exc_info())
        return 1
    return returned if isinstance(returned, int) else 0


def leave(status: int) -> NoReturn:
    """Ends this process with `status` as the interpreter ends it, less the teardown: the exit
    functions run and the standard streams are flushed."""
    atexit._run_exitfuncs()
    flush_and_exit(status)


def flush_and_exit(status: int) -> NoReturn:
    """Leaves at once with `status`, the standard streams flushed, no exit function run (a fork
    server's are its agent's, inherited: torch's and logging's, which it needs none of)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: nothing more can reach it
            pass
    os._exit(status)
