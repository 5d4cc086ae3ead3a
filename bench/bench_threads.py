"""Benchmark of the threads each training process computes on (a measurement, not a test).

Pods side by side on one node, each a process training the cluster journeys' smoke model (512
features, 2048 hidden, 4 classes, batch 256) for a fixed number of steps, started together:
  - default: torch's own choice, a thread for every CPU of the node (what a pod got before the stack
    set OMP_NUM_THREADS);
  - share: OMP_NUM_THREADS as the stack sets it (ddp_infra/world.py threads_per_process) for pods
    that ask for 1 CPU: 1.
The figure is the wall time until every pod has trained its steps, the median over interleaved
rounds, for 1 pod alone and for as many pods as the node has CPUs, and twice as many;
the ratio is share / default (below 1: the stack's choice is faster).
Usage: nice .venv/bin/python bench/bench_threads.py [--rounds 3] [--steps 100]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "infra")]

from ddp_infra import config as stack_config  # noqa: E402
from ddp_infra.names import PROJECT  # noqa: E402
from ddp_infra.world import World  # noqa: E402
from infra_harness import stack_config_with  # noqa: E402

# One pod's training: the smoke MLP's forward, loss, backward and AdamW step, seeded.
POD = """
import sys, torch
torch.manual_seed(7)
model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 4))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = torch.randn(256, 512), torch.randint(0, 4, (256,))
for _ in range(int(sys.argv[1])):
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
"""


def pods_wall_seconds(pods: int, steps: int, threads: int | None) -> float:
    """Seconds until `pods` processes started at once have each trained `steps` steps."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    started = time.perf_counter()
    running = [subprocess.Popen([sys.executable, "-c", POD, str(steps)], env=env) for _ in range(pods)]
    codes = [process.wait() for process in running]
    assert codes == [0] * pods, codes
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    world = World.from_config(stack_config.parse(stack_config_with("dev", resources__requests__cpu="1")), PROJECT, "dev")
    share = world.threads_per_process
    cpus = len(os.sched_getaffinity(0))
    print(f"{cpus} CPUs; torch's default: {cpus} threads a process; the stack's for pods of 1 CPU: {share}")
    for pods in (1, cpus, 2 * cpus):
        default, shared = [], []
        for _ in range(args.rounds):  # interleaved: drift on a shared machine hits both alike
            default.append(pods_wall_seconds(pods, args.steps, None))
            shared.append(pods_wall_seconds(pods, args.steps, share))
        a, b = statistics.median(default), statistics.median(shared)
        print(f"{pods} pod(s) side by side, {args.steps} steps each: default {a:.2f} s, share {b:.2f} s, share/default {b / a:.2f}")


if __name__ == "__main__":
    main()
