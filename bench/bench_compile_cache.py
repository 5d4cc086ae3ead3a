"""What the run's compile cache saves a world that forms again (a measurement, not a test).

The trainer's CLI, compiled, as a pod runs it: a new run (its compile cache empty: every graph
compiled), then a new process of the same run going on from its checkpoint (its step's graphs
loaded from the run's compile-cache/, trainer/compile_cache.py), as a lost pod's replacement would.
Each is a process of its own, in a fresh output directory each round; the figure is the first step
the [COMPILE] line reports, whose compiling (or loading) is what a re-formed world waits for.
By default the smoke test's MLP on the CPU; --lm the lm task at the GPT-2-small shape where there is a
GPU (bench/gpu_checks.sh), and at the GPU scripts' small shape where there is none (a check of the script).

Usage: nice .venv/bin/python bench/bench_compile_cache.py [--repeats 2] [--lm] [--json PATH]
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

from report import print_table  # bench/ is on sys.path when run

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from trainer import lines  # noqa: E402
from trainer.compile_cache import CACHE_DIR_ENV  # noqa: E402
from trainer.lines import Compiled  # noqa: E402

SMOKE = ["smoke", "--device", "cpu", "--samples", "512", "--batch", "64", "--features", "16", "--hidden", "32"]


def lm_task(shape: dict, batch: int) -> list[str]:
    return ["lm", "--n-layer", str(shape["n_layer"]), "--n-head", str(shape["n_head"]), "--d-model", str(shape["d_model"]),
            "--seq-len", str(shape["seq_len"]), "--batch", str(batch)]  # fmt: skip


def first_step(task: list[str], out: Path, epochs: int) -> Compiled:
    """The [COMPILE] line of one training process of the run in `out`, trained to `epochs` epochs."""
    command = [sys.executable, "-m", "trainer.train", *task, "--compile", "--epochs", str(epochs), "--out-dir", str(out),
               "--run-name", "run", "--checkpoint-every", "0"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    env.pop(CACHE_DIR_ENV, None)  # the run's own cache, as in a pod
    done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=1800)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    (compiled,) = [Compiled.parse(row) for row in lines.tagged(done.stdout, Compiled.PREFIX)]
    return compiled


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--lm", action="store_true", help="the lm task (GPT-2-small on a GPU) instead of the smoke MLP")
    parser.add_argument("--json", type=Path, help="write the figures here")
    options = parser.parse_args()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="bench-compile-cache-") as tmp:
        task, shape = SMOKE, "smoke MLP on the CPU"
        if options.lm:
            import torch

            from bench_gpu import GPT2, SMALL, write_jsonl

            data = Path(tmp) / "data"
            data.mkdir()
            write_jsonl(data / "train.jsonl", 64, 220, 0)  # a few steps of GPT-2-small an epoch
            write_jsonl(data / "val.jsonl", 4, 220, 1)
            on_a_gpu = torch.cuda.is_available()
            task = [*lm_task(GPT2 if on_a_gpu else SMALL, 16 if on_a_gpu else 4), "--data-dir", str(data)]
            shape = f"lm, {GPT2 if on_a_gpu else SMALL}, {torch.cuda.get_device_name(0) if on_a_gpu else 'CPU'}, torch {torch.__version__}"
        for round_ in range(options.repeats):
            out = Path(tmp) / f"round-{round_}"
            cold, warm = first_step(task, out, 1), first_step(task, out, 2)
            assert cold.loaded == 0 and warm.loaded == warm.graphs == cold.graphs, (cold, warm)
            rounds.append({"compiled_s": cold.seconds, "loaded_s": warm.seconds, "graphs": cold.graphs})
            print(f"[ROUND] {round_ + 1}: {cold.text()} | {warm.text()}", flush=True)
    compiled = statistics.median(r["compiled_s"] for r in rounds)
    loaded = statistics.median(r["loaded_s"] for r in rounds)
    rows = [("first step, every graph compiled", f"{compiled:.2f} s"), ("first step, every graph loaded from the run's cache", f"{loaded:.2f} s"),
            ("graphs", str(rounds[0]["graphs"])), ("loaded / compiled", f"{loaded / compiled:.2f}")]  # fmt: skip
    print_table(f"the trainer's first compiled step, {shape}, median of {options.repeats}", rows)
    if options.json:
        options.json.write_text(json.dumps({"rounds": rounds, "compiled_s": compiled, "loaded_s": loaded}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
