"""What compiling the loss with the model saves, on the CPU (a measurement, not a test).

The trainer's compiled `lm` step as it trains (its loss inside the compiled forward, trainer/throughput.py
ModelWithLoss) against the same step with its loss outside the graph (bench_gpu.py's ablation, the
step as it was), at GPT-2's vocabulary (50,257, padded to 50,304) and a small body (2 layers, 128 wide,
sequence 256, micro-batch 4), in a world of one on gloo. Each variant runs in a process of its own, so
that its peak resident memory is its own; the variants alternate over --repeats rounds. Figures: the
median step time of each and the peak RSS, trainer / ablation.

Usage: nice .venv/bin/python bench/bench_compiled_loss.py [--repeats 2] [--steps 5]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from report import print_table  # bench/ is on sys.path when run

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPE = dict(n_layer=2, n_head=2, d_model=128, seq_len=256)
VARIANTS = {"inside": "loss inside the compiled forward (the trainer)", "outside": "loss outside the compiled graph"}


def one_variant(variant: str, steps: int) -> dict:
    import torch

    from bench_gpu import loss_outside_the_graph, trainer_case
    from trainer import distributed
    from trainer.stop import StopRequest

    torch.set_num_threads(1)
    d = distributed.init("cpu", 600)
    with tempfile.TemporaryDirectory(prefix="bench-compiled-loss-") as tmp:
        flags = ["--compile"] if variant == "inside" else ["--no-compile"]
        case, trainer, _ = trainer_case(variant, 50257, 4, d, StopRequest(), Path(tmp), flags, SHAPE)
        if variant == "outside":
            loss_outside_the_graph(trainer)
        for _ in range(2):  # compilation, then one more
            case.step()
        times = []
        for _ in range(steps):
            started = time.perf_counter()
            case.step()
            times.append(time.perf_counter() - started)
    distributed.shutdown()
    return {"step_ms": statistics.median(times) * 1e3, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--variant", choices=sorted(VARIANTS), help=argparse.SUPPRESS)  # one process's measurement
    options = parser.parse_args()
    if options.variant:
        print(json.dumps(one_variant(options.variant, options.steps)))
        return 0
    runs: dict[str, list[dict]] = {variant: [] for variant in VARIANTS}
    for _ in range(options.repeats):
        for variant in VARIANTS:
            command = [sys.executable, __file__, "--variant", variant, "--steps", str(options.steps)]
            out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            runs[variant].append(json.loads(out.strip().splitlines()[-1]))
    step = {v: statistics.median(r["step_ms"] for r in runs[v]) for v in VARIANTS}
    rss = {v: max(r["peak_rss_mb"] for r in runs[v]) for v in VARIANTS}
    rows = [(f"{VARIANTS[v]}: step", f"{step[v]:.0f} ms") for v in VARIANTS]
    rows += [(f"{VARIANTS[v]}: peak RSS", f"{rss[v]:.0f} MB") for v in VARIANTS]
    rows += [("trainer / ablation: step time", f"{step['inside'] / step['outside']:.2f}"),
             ("trainer / ablation: peak RSS", f"{rss['inside'] / rss['outside']:.2f}")]  # fmt: skip
    print_table(f"compiled lm step on the CPU, vocab 50257, {SHAPE}, micro-batch 4, {options.repeats} rounds", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
