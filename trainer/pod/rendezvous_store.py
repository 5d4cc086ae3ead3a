"""The world's rendezvous store, in a process (a pod) of its own.

Usage: python -m trainer.pod.rendezvous_store <port>

torchrun's c10d rendezvous keeps its state in a TCPStore that, by default, node 0's agent hosts:
when pod 0 is lost the store goes with it, every other pod's torchrun fails, and the world can
only form again once pod 0's replacement has started and imported torch. Hosted here instead, the
store outlives any training pod: a lost pod, pod 0 included, is one member gone from a rendezvous
that goes on, and its replacement joins it like any other. The pods then get RDZV_ENDPOINT (and
PET_RDZV_ENDPOINT) = this process's address and port, and none of them hosts the store.

The store's server listens on every address of the machine (torch binds its server to the
wildcard, "::" dual-stack or else 0.0.0.0, whatever host it is given), so the pods reach it at the
pod's or its Service's address; the host given below is only where this process's own client of
the store connects. Exits 0 on SIGTERM (or SIGINT), 2 for a bad command line, 1 if the port
cannot be listened on.
"""

from __future__ import annotations

import re
import signal
import sys

from trainer import console
from trainer.pod.quick_exit import exit_status, leave

USAGE = "python -m trainer.pod.rendezvous_store <port>"
STOP = {signal.SIGTERM, signal.SIGINT}


def parse_port(args: list[str]) -> int:
    """The one argument, a TCP port; ValueError naming what was given and what is allowed."""
    if len(args) != 1:
        raise ValueError(f"expected one argument, the port to listen on (a whole number in 1..65535); got {args!r}")
    if not re.fullmatch(r"[0-9]{1,5}", args[0]) or not 0 < int(args[0]) <= 65535:
        raise ValueError(f"the port must be a whole number in 1..65535; got {args[0]!r}")
    return int(args[0])


def main(args: list[str]) -> int:
    try:
        port = parse_port(args)
    except ValueError as bad:
        console.line(f"[RDZV] usage: {USAGE}: {bad}", stream=sys.stderr)
        return 2
    # SIGTERM (the kubelet's) and SIGINT are blocked before the store's server thread starts, which
    # inherits this mask: whichever thread the kernel picks, the signal waits for sigwait below,
    # with no handler to run at an awkward point (a second SIGTERM during the interpreter's exit).
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP)
    from torch.distributed import TCPStore

    try:
        store = TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    except RuntimeError as exc:  # DistNetworkError: the port is taken, or not ours to bind
        console.line(f"[RDZV] cannot listen on port {port}: {exc}", stream=sys.stderr)
        return 1
    console.line(f"[RDZV] store listening on port {store.port}")
    received = signal.sigwait(STOP)
    # `store` is used here, after the wait: it (and its server) lives until this line at least.
    console.line(f"[RDZV] {signal.Signals(received).name}: store on port {store.port} stopped")
    return 0


if __name__ == "__main__":
    leave(exit_status(main, sys.argv[1:]))  # without tearing down the torch it imported (trainer/pod/quick_exit.py)
