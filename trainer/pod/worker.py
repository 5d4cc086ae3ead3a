"""What each training process runs, forked from the agent's fork server (trainer/pod/agent.py).

torchrun's --run-path runs this file in the worker, with the arguments that follow it on
torchrun's command line: `-m <module> <args>` or `<script> <args>`, run as `python -m <module>`
or `python <script>` would run them.
"""

from __future__ import annotations

import ctypes
import os
import runpy
import sys
from typing import Sequence

_PR_SET_NAME = 15
_NAME_BYTES = 15  # what the kernel keeps of a process name


def name_this_process(name: str) -> None:
    """The name ps, top and /proc/<pid>/comm show (its first 15 bytes)."""
    ctypes.CDLL(None).prctl(_PR_SET_NAME, name.encode()[:_NAME_BYTES], 0, 0, 0)


def run(args: Sequence[str]) -> None:
    module = args[0] == "-m"
    target, rest = (args[1], args[2:]) if module else (args[0], args[1:])
    # Every worker's command line is the fork server's: its name says what it runs, in ps and top.
    name_this_process(target if module else os.path.basename(target))
    sys.argv = [target, *rest]
    try:
        if module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
    except SystemExit as stop:
        if stop.code not in (None, 0):
            raise  # its exit status is the worker's; a successful one is a plain return for torchrun


if __name__ == "__main__":
    run(sys.argv[1:])
