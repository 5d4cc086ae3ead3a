"""Benchmark of the training image's code on this machine (a measurement, not a test).

Side by side in one run, with the smoke test's model (seed 001's flags, more samples so an epoch
lasts long enough to time):
  - smoke-test throughput per process at world size 1 and 2 (torchrun on this host, gloo, CPU).
What a checkpoint costs the loop is bench_checkpoint.py's measurement.
Each process runs single-threaded (OMP_NUM_THREADS=1), so per-process figures compare like for like.
Usage: .venv/bin/python bench/bench_trainer.py [--samples N] [--epochs N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from report import print_table  # bench/report.py: the scripts run with bench/ on sys.path

REPO = Path(__file__).resolve().parents[1]
SMOKE = ["smoke", "--batch", "256", "--features", "128", "--classes", "4", "--lr", "3e-3", "--seed", "42"]


def run_training(world_size: int, out_dir: Path, extra: list[str]) -> str:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world_size}",
               "-m", "trainer.train", *SMOKE, "--out-dir", str(out_dir), "--run-name", "bench", *extra]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "PYTHONWARNINGS": "ignore"}
    result = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        sys.exit(f"training at world size {world_size} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result.stdout


def epoch_records(out_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (out_dir / "bench" / "metrics.jsonl").read_text().splitlines()]


def throughput_per_process(world_size: int, samples: int, epochs: int, work: Path) -> tuple[float, float]:
    """Samples/s per process and seconds per optimizer step, over the epochs after the first (warm-up)."""
    out = work / f"ws{world_size}"
    run_training(world_size, out, ["--samples", str(samples), "--epochs", str(epochs), "--checkpoint-every", "0",
                                   "--log-every", "1000000"])  # fmt: skip
    warm = epoch_records(out)[1:]
    rate = statistics.mean(r["samples_per_s"] for r in warm) / world_size
    steps_per_epoch = samples // world_size // 256
    step_s = statistics.mean(r["seconds"] for r in warm) / steps_per_epoch
    return rate, step_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=65536)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-trainer-") as tmp:
        work = Path(tmp)
        rate1, step1 = throughput_per_process(1, args.samples, args.epochs, work)
        rate2, step2 = throughput_per_process(2, args.samples, args.epochs, work)
    rows = [
        ("smoke samples/s per process, world size 1", f"{rate1:,.0f}"),
        ("smoke samples/s per process, world size 2", f"{rate2:,.0f}"),
        ("per-process throughput, world 2 / world 1", f"{rate2 / rate1:.2f}"),
        ("training step (batch 256), world size 1", f"{step1 * 1e3:.2f} ms"),
        ("training step (batch 256), world size 2", f"{step2 * 1e3:.2f} ms"),
    ]
    print_table(f"bench_trainer: {args.samples} samples, {args.epochs} epochs (first one excluded), {os.cpu_count()} CPUs, "
                "CPU/gloo", rows)


if __name__ == "__main__":
    main()
