"""How much an async checkpoint slows the training steps that run while it is written (a measurement,
not a test).

The trainer's `lm` step as bench/bench_gpu.py builds it (GPT-2-small shape, bf16, compiled, on a GPU),
and the trainer's own checkpoint (Trainer.save_checkpoint: the state staged into pinned CPU memory,
then written and committed by a background thread while the loop goes on). Side by side in one
process: steps with no save in flight, then --repeats saves, each followed by the steps that run until
it is committed. Every step is timed to the device's end of it. Figures: the median step without a
save and while one is written, their ratio (goal at most 1.10), and what each save blocked the loop.
Without CUDA it says so and exits 0; --device cpu runs a small shape uncompiled, a check of the script
(the writer thread and the step share the CPU there), not a figure.

Usage: python bench/bench_gpu_checkpoint.py [--device cuda|cpu] [--repeats 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_gpu import GPT2, SMALL, trainer_case  # bench/ is on sys.path when run
from report import on_a_gpu, print_table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def measure(options) -> dict:
    import torch

    from trainer import distributed
    from trainer.checkpoint.record import CheckpointReason
    from trainer.stop import StopRequest

    cuda = options.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    d = distributed.init(options.device, 600)
    shape = GPT2 if cuda else SMALL
    vocab, batch = (50257, 16) if cuda else (512, 4)
    with tempfile.TemporaryDirectory(prefix="bench-gpu-checkpoint-") as tmp:
        flags = [] if cuda else ["--no-compile"]
        case, trainer, _ = trainer_case("trainer", vocab, batch, d, StopRequest(), Path(tmp), flags, shape)

        def timed_step() -> float:
            started = time.perf_counter()
            case.step()
            sync()
            return time.perf_counter() - started

        for _ in range(options.warmup):
            case.step()
        sync()
        state_bytes = sum(t.nbytes for t in trainer.model.state_dict().values()) + sum(
            t.nbytes for s in trainer.step.optimizer.state.values() for t in s.values() if torch.is_tensor(t)
        )
        without = [timed_step() for _ in range(options.steps)]
        blocked, during, written = [], [], []
        for n in range(options.repeats):
            trainer.progress.global_step = n + 1  # a checkpoint per step number, as the loop saves them
            sync()
            started = time.perf_counter()
            trainer.save_checkpoint(CheckpointReason.PERIODIC)
            blocked.append(time.perf_counter() - started)
            while trainer.checkpoints.writer.writing():
                during.append(timed_step())
            trainer.checkpoints.writer.wait()
            written.append(time.perf_counter() - started)
            without += [timed_step() for _ in range(options.steps)]  # interleaved, so drift hits both alike
        trainer.checkpoints.close()
    distributed.shutdown()
    device = torch.cuda.get_device_name(d.device) if cuda else "cpu"
    return {
        "device": device, "torch": torch.__version__, "cuda": torch.version.cuda, "shape": shape, "batch": batch,
        "state_mib": round(state_bytes / 2**20), "step_ms": round(statistics.median(without) * 1e3, 2),
        "step_during_save_ms": round(statistics.median(during) * 1e3, 2) if during else None,
        "steps_during_saves": len(during), "blocked_ms": [round(b * 1e3, 1) for b in blocked],
        "written_s": [round(w, 2) for w in written],
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None, help="cuda; without one, nothing to measure")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=10, help="steps with no save, before and after each save")
    parser.add_argument("--repeats", type=int, default=3, help="saves")
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    if options.device is None:
        if not on_a_gpu("bench_gpu_checkpoint"):
            return 0
        options.device = "cuda"
    r = measure(options)
    if options.json:
        options.json.write_text(json.dumps(r, indent=1))
    during = r["step_during_save_ms"]
    rows = [
        ("state: model + AdamW moments", f"{r['state_mib']} MiB"),
        ("step, no save in flight (median)", f"{r['step_ms']:.2f} ms"),
        (f"step while a save is written (median of {r['steps_during_saves']})", "none" if during is None else f"{during:.2f} ms"),
        ("the loop blocked by each save", ", ".join(f"{b} ms" for b in r["blocked_ms"])),
        ("each save written and committed", ", ".join(f"{w} s" for w in r["written_s"])),
        ("step while writing / step (goal <= 1.10)", "n/a" if during is None else f"{during / r['step_ms']:.2f}"),
    ]  # fmt: skip
    print_table(f"bench_gpu_checkpoint: {r['device']}, torch {r['torch']}, {r['shape']}, micro-batch {r['batch']}", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
