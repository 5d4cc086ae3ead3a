"""torchrun, in a process that first starts the fork server its workers are forked from.

Usage (the entrypoint's, see launch.torchrun_argv): python -m trainer.pod.agent [--await-start] <torchrun's arguments>

Each world torchrun forms starts its workers anew: after a lost pod, every pod's. Started as
`python -m <module>`, each worker imports torch and the training code again (seconds, on every
pod, before the world can train). Forked from a server that has imported them once, as soon as
the pod starts and while torchrun joins the rendezvous, a worker starts with them in memory.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import sys
from typing import Sequence

from trainer.pod.launch import AWAIT_START, GO, worker_preload


def main(args: Sequence[str]) -> None:
    held = args[:1] == [AWAIT_START]
    args = list(args[1:] if held else args)
    preload = worker_preload(args)
    if preload:
        multiprocessing.set_forkserver_preload(preload)
        multiprocessing.forkserver.ensure_running()  # it imports them now, beside this process's own imports
    from torch.distributed.run import main as torchrun

    if held and sys.stdin.readline().strip() != GO:
        return  # the entrypoint ended without its go, and the pod with it
    torchrun(args)


# Guarded: every forked worker imports this module again, as multiprocessing's __mp_main__.
if __name__ == "__main__":
    main(sys.argv[1:])
