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
import pickle
import sys
from datetime import timedelta
from typing import Sequence

from trainer import console
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
    torchrun(open_rendezvous(args))


def open_rendezvous(args: list[str]) -> list[str]:
    """torchrun's arguments with its rendezvous id moved past every rendezvous of that id that a
    store apart holds closed.

    torchrun closes its rendezvous when its world ends (the run finished, or failed for good). A
    store on pod 0 ends with it; a store apart outlives it, and the next world of the same id (the
    Job replaced for one more epoch, a StatefulSet's pods started again after the run) would be
    refused as joining a closed rendezvous. Every pod of that next world reads the same closed
    ones and takes the same next id, `<id>.<n>`.
    """
    options = dict(arg[2:].split("=", 1) for arg in args if arg.startswith("--rdzv-") and "=" in arg)
    conf = dict(pair.split("=", 1) for pair in options.get("rdzv-conf", "").split(",") if "=" in pair)
    if options.get("rdzv-backend") != "c10d" or conf.get("is_host") != "0":
        return args
    from torch.distributed import TCPStore
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend

    host, port = options["rdzv-endpoint"].rsplit(":", 1)
    timeout = timedelta(seconds=int(conf.get("read_timeout", 60)))
    store = TCPStore(host.strip("[]"), int(port), is_master=False, timeout=timeout)
    first = options["rdzv-id"]
    for generation in itertools.count():
        run_id = first if generation == 0 else f"{first}.{generation}"
        state = C10dRendezvousBackend(store, run_id).get_state()
        if state is None or not pickle.loads(state[0]).closed:
            break
    if run_id != first:
        console.line(f"[DDP] rendezvous {first} is closed (a world of it ended): this world's is {run_id}")
    return [f"--rdzv-id={run_id}" if arg.startswith("--rdzv-id=") else arg for arg in args]


# Guarded: every forked worker imports this module again, as multiprocessing's __mp_main__.
if __name__ == "__main__":
    main(sys.argv[1:])
