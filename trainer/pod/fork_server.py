"""The workers' fork server, forked from the agent once it imported torch (trainer/pod/agent.py).

torchrun's `--start-method=forkserver` forks every worker from one server process. Python's own
server is a new interpreter that imports its preload itself: torch again, beside the agent's own
import of it, about 2 CPU-seconds on every pod at every start. Forked from the agent after torch
is imported and before torchrun starts a thread, the server has torch in memory already, imports
only the rest of the preload (what every worker imports before its first step, and the training
module where it is the product's own: trainer/pod/launch.py's worker_preload) while the agent goes
on to the rendezvous, freezes what it imported out of the workers' garbage collections, and serves
multiprocessing's fork-server protocol as Python's does. It is named `ddp-fork-server` in ps and
top (its command line is the agent's), and once its agent is gone it leaves without tearing its
interpreter down (trainer/pod/quick_exit.py).
"""

from __future__ import annotations

import gc
import importlib
import multiprocessing
import os
import socket
import sys
import traceback
from multiprocessing import connection, forkserver, resource_tracker
from typing import Sequence

from trainer.pod.quick_exit import flush_and_exit
from trainer.pod.worker import name_this_process

NAME = "ddp-fork-server"


def start_forked(preload: Sequence[str]) -> int:
    """Imports preload's first module here (torch, which the agent needs too), forks the server,
    which imports the others, and makes it the one this process's forkserver context uses; its pid."""
    importlib.import_module(preload[0])
    resource_tracker.ensure_running()
    listener = socket.socket(socket.AF_UNIX)
    address = connection.arbitrary_address("AF_UNIX")
    listener.bind(address)
    os.chmod(address, 0o600)
    listener.listen()
    alive_r, alive_w = os.pipe()  # this process holds the write end: its end is the server's EOF
    for stream in (sys.stdout, sys.stderr):
        stream.flush()  # or both processes would write what this one buffered
    # Forked before this process's fork-server state is set (and outside its lock): the server and
    # its workers start from it as a new interpreter would, so a worker's own forkserver context
    # (a DataLoader's workers) starts a server of its own instead of waiting on a lock held here.
    pid = os.fork()
    if pid == 0:
        os.close(alive_w)
        _serve(listener.fileno(), alive_r, preload[1:])
    listener.close()
    os.close(alive_r)
    server = forkserver._forkserver
    with server._lock:
        server._forkserver_address, server._forkserver_alive_fd, server._forkserver_pid = address, alive_w, pid
    multiprocessing.set_forkserver_preload(list(preload))  # should it die, Python's own server replaces it
    return pid


def _serve(listener_fd: int, alive_r: int, preload: Sequence[str]) -> None:
    name_this_process(NAME)
    status = 0
    try:
        for module in preload:
            try:
                importlib.import_module(module)
            except ImportError:  # as Python's own server does: a worker that needs it then says so
                pass
        # What the workers inherit is out of their garbage collections' way: a full collection over
        # torch's and torch._dynamo's 350,000 objects takes 0.2 CPU-s, and touching them copies the
        # pages the workers share with this process (gc.freeze's own advice for a server that forks).
        gc.freeze()
        forkserver.main(listener_fd, alive_r, [])
    except SystemExit:  # its agent is gone
        pass
    except BaseException:
        traceback.print_exc()
        status = 1
    flush_and_exit(status)
