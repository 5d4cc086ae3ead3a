"""torchrun, in a process that first starts the fork server its workers are forked from.

Usage (the entrypoint's, see launch.torchrun_argv): python -m trainer.pod.agent [--await-start] <torchrun's arguments>

Each world torchrun forms starts its workers anew: after a lost pod, every pod's. Started as
`python -m <module>`, each worker imports torch and the training code again (seconds, on every
pod, before the world can train). Forked from a server that has imported them once, as soon as
the pod starts and while torchrun joins the rendezvous, a worker starts with them in memory.
"""

from __future__ import annotations

import itertools
import multiprocessing
import multiprocessing.forkserver
import os
import pickle
import sys
from datetime import timedelta
from typing import Sequence

from trainer import console
from trainer.pod.launch import AWAIT_START, GO, SPARE_UNUSED, worker_preload


def main(args: Sequence[str]) -> None:
    held = args[:1] == [AWAIT_START]
    args = list(args[1:] if held else args)
    preload = worker_preload(args)
    if preload:
        multiprocessing.set_forkserver_preload(preload)
        multiprocessing.forkserver.ensure_running()  # it imports them now, beside this process's own imports
    from torch.distributed.run import main as torchrun

    from trainer.pod.spares import keep_spares_aside

    if held and sys.stdin.readline().strip() != GO:
        return  # the entrypoint ended without its go, and the pod with it
    args = open_rendezvous(args)
    keep_spares_aside()
    try:
        torchrun(args)
    except Exception:
        # torchrun ends a spare whose rendezvous closed with an error of its own making (its agent
        # returns no result, which its launcher then reads): the rendezvous's state says what happened.
        if not waited_as_spare_until_closed(args):
            raise
        sys.exit(SPARE_UNUSED)


def open_rendezvous(args: list[str]) -> list[str]:
    """torchrun's arguments with its rendezvous id moved past every rendezvous of that id that a
    store apart holds closed.

    torchrun closes its rendezvous when its world ends (the run finished, or failed for good). A
    store on pod 0 ends with it; a store apart outlives it, and the next world of the same id (the
    Job replaced for one more epoch, a StatefulSet's pods started again after the run) would be
    refused as joining a closed rendezvous. Every pod of that next world reads the same closed
    ones and takes the same next id, `<id>.<n>`.
    """
    options = _rendezvous_options(args)
    if options is None:
        return args
    first = options["rdzv-id"]
    for generation in itertools.count():
        run_id = first if generation == 0 else f"{first}.{generation}"
        state = _rendezvous_state(options, run_id)
        if state is None or not state.closed:
            break
    if run_id != first:
        console.line(f"[DDP] rendezvous {first} is closed (a world of it ended): this world's is {run_id}")
    return [f"--rdzv-id={run_id}" if arg.startswith("--rdzv-id=") else arg for arg in args]


def waited_as_spare_until_closed(args: list[str]) -> bool:
    """Whether this agent ended waiting as a spare in a rendezvous that has closed (the world it
    waited for ended). torchrun puts a node the full world has no room for in its redundancy list,
    and leaves it there when the rendezvous closes."""
    options = _rendezvous_options(args)
    state = _rendezvous_state(options, options["rdzv-id"]) if options else None
    return bool(state and state.closed and any(node.pid == os.getpid() for node in state.redundancy_list))


def _rendezvous_options(args: list[str]) -> dict[str, str] | None:
    """torchrun's --rdzv-* options where its c10d store lives apart from this pod; None otherwise."""
    options = dict(arg[2:].split("=", 1) for arg in args if arg.startswith("--rdzv-") and "=" in arg)
    conf = dict(pair.split("=", 1) for pair in options.get("rdzv-conf", "").split(",") if "=" in pair)
    if options.get("rdzv-backend") != "c10d" or conf.get("is_host") != "0":
        return None
    return {**options, "read-timeout": conf.get("read_timeout", "60")}


def _rendezvous_state(options: dict[str, str], run_id: str):
    """torchrun's state of the rendezvous `run_id` in the store apart; None before any node joined it."""
    from torch.distributed import TCPStore
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend

    host, port = options["rdzv-endpoint"].rsplit(":", 1)
    store = TCPStore(host.strip("[]"), int(port), is_master=False, timeout=timedelta(seconds=int(options["read-timeout"])))
    state = C10dRendezvousBackend(store, run_id).get_state()
    return None if state is None else pickle.loads(state[0])


# Guarded: every forked worker imports this module again, as multiprocessing's __mp_main__.
if __name__ == "__main__":
    main(sys.argv[1:])
