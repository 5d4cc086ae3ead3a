"""Benchmark of a pod's start and end with the workers' fork server forked from the agent (a
measurement, not a test).

A pod runs the entrypoint, which runs torchrun in trainer/pod/agent.py, and every worker is forked
from a fork server. Side by side, interleaved, the same pod (one pod of two workers training the
smoke run for 4 steps, as the journeys' pods do) with:
  - forked: the product, the server forked from the agent once it imported torch
    (trainer/pod/fork_server.py), holding what every worker imports on its way to its first step
    (trainer/pod/launch.py's worker_preload);
  - torch and the module alone: that server as it was, holding torch and the training module
    only, each worker importing torch._dynamo (DDP's constructor) and rank 0 TensorBoard itself,
    and nothing frozen out of the workers' garbage collections;
  - spawned: Python's own fork server, a new interpreter importing torch and the trainer again
    (leaving without teardown too, as the product's did before).
The figures are the pod's CPU seconds, every process it started included (this process is their
subreaper and reaps them all), and its wall seconds to its end; medians over the rounds; the
ratios are forked / each other.
Usage: nice .venv/bin/python bench/bench_fork_server.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "trainer")]
from report import print_table  # noqa: E402  bench/report.py: the scripts run with bench/ on sys.path
from trainer_testing import clean_env, entrypoint_command, free_port, pod_env  # noqa: E402

RUN = ["-m", "trainer.train", "smoke", "--epochs", "1", "--batch", "256", "--samples", "1024", "--features", "512",
       "--hidden", "256", "--classes", "4", "--seed", "7", "--checkpoint-every", "0"]  # fmt: skip
# Python's own fork server in place of the forked one, in every process of the pod (a sitecustomize),
# leaving without teardown as the product's did before.
SPAWNED = """
import multiprocessing, multiprocessing.forkserver
import trainer.pod.fork_server as fork_server

def spawned(preload):
    multiprocessing.set_forkserver_preload([*preload, "spawned_server_exit"])
    multiprocessing.forkserver.ensure_running()

fork_server.start_forked = spawned
"""
# The server as it was: torch and the training module, nothing frozen.
MODULE_ONLY = """
import gc
import trainer.pod.launch as launch

launch._EVERY_WORKERS[:] = ["torch"]
launch._OWN_TRACKING[:] = []
gc.freeze = lambda: None
"""
SPAWNED_EXIT = "import atexit\nfrom trainer.pod.quick_exit import flush_and_exit\natexit.register(flush_and_exit, 0)\n"
_PR_SET_CHILD_SUBREAPER = 36
# A process that imported what the fork server holds forks a child, which runs one full garbage
# collection: the MB of the pages it shared with its parent that the collection copied.
COPIED_BY_A_COLLECTION = """
import gc, os, sys
from trainer.pod.launch import WORKER_SCRIPT, worker_preload
for module in worker_preload(["--start-method=forkserver", "--run-path", str(WORKER_SCRIPT), "-m", "trainer.train"]):
    __import__(module)
if sys.argv[1] == "frozen":
    gc.freeze()
def private_dirty_kb():
    return next(int(line.split()[1]) for line in open("/proc/self/smaps_rollup") if line.startswith("Private_Dirty"))
pid = os.fork()
if pid == 0:
    before = private_dirty_kb()
    gc.collect()
    print((private_dirty_kb() - before) / 1024, flush=True)
    os._exit(0)
os.waitpid(pid, 0)
os._exit(0)
"""


def pod_seconds(site: Path | None) -> tuple[float, float]:
    """CPU and wall seconds of one pod from its start to its last process's end, with `site`'s
    sitecustomize in each of its processes."""
    out = tempfile.mkdtemp(prefix="bench-fork-")
    env = clean_env(**pod_env("bench-0", free_port(), nnodes=1, nproc=2), OUT_DIR=out, OMP_NUM_THREADS="1")
    if site:
        env["PYTHONPATH"] = f"{site}:{env['PYTHONPATH']}"
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    subprocess.run(entrypoint_command(RUN), env=env, cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while True:  # the fork server outlives its agent by a moment: reaped here, its subreaper
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    wall, after = time.monotonic() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def copied_by_a_collection(how: str) -> float:
    out = subprocess.run([sys.executable, "-c", COPIED_BY_A_COLLECTION, how], cwd=REPO, env=clean_env(),
                         check=True, capture_output=True, text=True).stdout  # fmt: skip
    return float(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    ctypes.CDLL(None).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    sites: dict[str, Path | None] = {"forked": None}
    for how, files in (("torch and the module alone", {"sitecustomize.py": MODULE_ONLY}),
                       ("spawned", {"sitecustomize.py": SPAWNED, "spawned_server_exit.py": SPAWNED_EXIT})):  # fmt: skip
        sites[how] = Path(tempfile.mkdtemp(prefix="bench-site-"))
        for name, text in files.items():
            (sites[how] / name).write_text(text)
    seconds: dict[str, list[tuple[float, float]]] = {how: [] for how in sites}
    for _ in range(args.rounds):  # interleaved: drift on a shared machine hits all alike
        for how, site in sites.items():
            seconds[how].append(pod_seconds(site))
    cpu = {how: statistics.median(s[0] for s in runs) for how, runs in seconds.items()}
    wall = {how: statistics.median(s[1] for s in runs) for how, runs in seconds.items()}
    rows = []
    for what, figures in (("CPU", cpu), ("wall", wall)):
        for other in ("torch and the module alone", "spawned"):
            rows.append((f"{what} seconds, forked / {other}",
                         f"{figures['forked']:.2f} / {figures[other]:.2f} = {figures['forked'] / figures[other]:.2f}"))  # fmt: skip
    print_table(f"one pod of two workers, 4 steps of the smoke run, start to its last process's end, median of {args.rounds}", rows)
    copied = {how: statistics.median(copied_by_a_collection(how) for _ in range(args.rounds)) for how in ("frozen", "not frozen")}
    print_table(f"MB of a worker's pages shared with its fork server that its first full garbage collection copies, median of {args.rounds}",
                [("frozen (gc.freeze in the server) / not frozen", f"{copied['frozen']:.1f} / {copied['not frozen']:.1f}")])


if __name__ == "__main__":
    main()
