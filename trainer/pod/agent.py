"""torchrun, in a process that first forks the server its workers are forked from (trainer/pod/fork_server.py).

Usage (the entrypoint's, see launch.torchrun_argv): python -m trainer.pod.agent [--await-start] <torchrun's arguments>

Each world torchrun forms starts its workers anew: after a lost pod, every pod's. Started as
`python -m <module>`, each worker imports torch and the training code again (seconds, on every
pod, before the world can train). Forked from a server that has imported them once, as soon as
the pod starts and while torchrun joins the rendezvous, a worker starts with them in memory.
"""

from __future__ import annotations

import itertools
import logging
import os
import pickle
import socket
import sys
from datetime import timedelta
from types import SimpleNamespace
from typing import Sequence

from trainer import console
from trainer.contract import SPARE_PODS
from trainer.pod.fork_server import start_forked
from trainer.pod.launch import AWAIT_START, GO, SPARE_UNUSED, worker_preload
from trainer.pod.quick_exit import exit_status, leave


def main(args: Sequence[str]) -> None:
    held = args[:1] == [AWAIT_START]
    args = list(args[1:] if held else args)
    preload = worker_preload(args)
    if preload:
        start_forked(preload)  # with torch imported here, before torchrun starts a thread
    from torch.distributed.run import main as torchrun

    from torch.distributed.elastic.multiprocessing.api import SignalException

    from trainer.pod.heartbeats import name_rendezvous_events_from_the_frame, re_form_without_a_gone_member, say_when_a_heartbeat_lapses
    from trainer.pod.spares import keep_spares_aside

    if held and sys.stdin.readline().strip() != GO:
        return  # the entrypoint ended without its go, and the pod with it
    args = open_rendezvous(args)
    signals_pass_through_logging(SignalException)
    keep_spares_aside()
    say_when_a_heartbeat_lapses()
    re_form_without_a_gone_member()
    name_rendezvous_events_from_the_frame()
    try:
        torchrun(args)
    except SignalException:
        leave_rendezvous(args)
        raise
    except Exception:
        # torchrun ends a spare whose rendezvous closed with an error of its own making (its agent
        # returns no result, which its launcher then reads): the rendezvous's state says what happened.
        has_spares = os.environ.get(SPARE_PODS.name, "").strip() not in ("", "0")
        if not (has_spares and waited_as_spare_until_closed(args)):
            raise
        sys.exit(SPARE_UNUSED)


def signals_pass_through_logging(signal_exception: type[Exception]) -> None:
    """torchrun answers SIGTERM by raising SignalException, an Exception, from wherever its main
    thread is. Inside a log line's write, logging takes it for a failure of the log itself: it prints
    "--- Logging error ---" and goes on, and the signal is lost (the agent restarted its workers
    and the pod ran on until its grace period ended). Here it goes on up, as from anywhere else."""
    handle_error = logging.Handler.handleError

    def raise_signals(self: logging.Handler, record: logging.LogRecord) -> None:
        raised = sys.exc_info()[1]
        if isinstance(raised, signal_exception):
            raise raised
        handle_error(self, record)

    logging.Handler.handleError = raise_signals


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
    try:
        state = _rendezvous_state(options, options["rdzv-id"], _LOOK_TIMEOUT) if options else None
    except (RuntimeError, OSError):  # the store is gone too: whatever ended this agent, it was no closed rendezvous
        return False
    return bool(state and state.closed and any(is_this_node(node, args) for node in state.redundancy_list))


def leave_rendezvous(args: list[str]) -> None:
    """Takes this agent's node out of its rendezvous at once, as its pod stops (SIGTERM). torchrun
    leaves it there until its heartbeat lapses (keep_alive_max_attempt x keep_alive_interval):
    until then the next world cannot form without it, and no spare can take its place."""
    options = _rendezvous_options(args)
    if options is None:
        return
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _remove_participant_epilogue

    nnodes = next(arg.split("=", 1)[1] for arg in args if arg.startswith("--nnodes="))
    fewest = SimpleNamespace(min_nodes=int(nnodes.split(":")[0]))
    try:
        backend = _rendezvous_backend(options, options["rdzv-id"], _LOOK_TIMEOUT)
        for _ in range(10):  # another node may write between this read and this write: read again
            found = backend.get_state()
            if found is None:
                return
            state, token = pickle.loads(found[0]), found[1]
            node = next((node for node in state.last_heartbeats if is_this_node(node, args)), None)
            if node is None:
                return
            del state.last_heartbeats[node]
            state.wait_list.discard(node)
            state.redundancy_list.discard(node)
            if state.participants.pop(node, None) is not None:
                _remove_participant_epilogue(state, fewest)
            if backend.set_state(pickle.dumps(state), token)[2]:
                console.line("[DDP] left the rendezvous: the next world forms without waiting for this pod's heartbeat to lapse")
                return
    except (RuntimeError, OSError) as error:  # the store is gone: its heartbeat lapses there, as torchrun leaves it
        console.line(f"[DDP] could not leave the rendezvous ({type(error).__name__}): it drops this pod once its heartbeat lapses")


def is_this_node(node, args: list[str]) -> bool:
    """Whether torchrun's node descriptor names this agent: its address (--local-addr, else the
    FQDN) and its process id (in a pod, often the same number as in every other pod)."""
    local_addr = next((arg.split("=", 1)[1] for arg in args if arg.startswith("--local-addr=")), None)
    return (node.addr, node.pid) == (local_addr or socket.getfqdn(), os.getpid())


def _rendezvous_options(args: list[str]) -> dict[str, str] | None:
    """torchrun's --rdzv-* options where its c10d store lives apart from this pod; None otherwise."""
    options = dict(arg[2:].split("=", 1) for arg in args if arg.startswith("--rdzv-") and "=" in arg)
    conf = dict(pair.split("=", 1) for pair in options.get("rdzv-conf", "").split(",") if "=" in pair)
    if options.get("rdzv-backend") != "c10d" or conf.get("is_host") != "0":
        return None
    return {**options, "read-timeout": conf.get("read_timeout", "60")}


def _rendezvous_state(options: dict[str, str], run_id: str, timeout: float | None = None):
    """torchrun's state of the rendezvous `run_id` in the store apart; None before any node joined it."""
    state = _rendezvous_backend(options, run_id, timeout).get_state()
    return None if state is None else pickle.loads(state[0])


def _rendezvous_backend(options: dict[str, str], run_id: str, timeout: float | None = None):
    """torchrun's own c10d backend of the rendezvous `run_id`, on the store apart; `timeout` (else
    torchrun's read timeout) bounds each connection and read."""
    from torch.distributed import TCPStore
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend

    host, port = options["rdzv-endpoint"].rsplit(":", 1)
    seconds = timeout if timeout is not None else int(options["read-timeout"])
    store = TCPStore(host.strip("[]"), int(port), is_master=False, timeout=timedelta(seconds=seconds))
    return C10dRendezvousBackend(store, run_id)


# How long a look at the rendezvous as torchrun ends may take: a store that does not answer by then
# is gone, and the pod must not spend its grace period (or its re-join) on it.
_LOOK_TIMEOUT = 3.0


# Guarded: every forked worker imports this module again, as multiprocessing's __mp_main__.
if __name__ == "__main__":
    leave(exit_status(main, sys.argv[1:]))
