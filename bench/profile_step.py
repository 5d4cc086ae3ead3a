"""Where a training step's time goes: the trainer's `lm` step against a nanoGPT-class loop, part by part
(a measurement, not a test).

Both run under torch.profiler for --steps steps, after --warmup steps: the trainer's own epoch loop
(Trainer._train_epoch: its data loader, step, hang watch beat and figures sync) and the reference loop
of bench/bench_gpu.py, their parts named alike (trainer/profiling.py). From each trace:
  - per part: host time (the part's span on the training thread) and device time (the kernels launched
    within that span, from any thread: the backward's come from autograd's), per step;
  - per kernel class (matmuls, attention, NCCL, compiled kernels, copies and fills, other): device time
    per step;
  - the device's busy time per step (the union of its kernels) beside the step's wall time.
On a GPU: the GPT-2-small shape in bf16, compiled, as bench/bench_gpu.py measures it. On the CPU
(--device cpu, a small shape, uncompiled) there are no kernels: host time is the compute itself.
The profiler's own cost is in every figure; compare the two columns of one run, not runs.

Usage: python bench/profile_step.py [--device cuda|cpu] [--shape gpt2|small] [--steps 10] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

from bench_gpu import GPT2, SMALL, reference_cases, trainer_case  # bench/ is on sys.path when run

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from trainer.profiling import PARTS  # noqa: E402

SHAPES = {"gpt2": GPT2, "small": SMALL}
OUTSIDE = "outside every part"
# (class, substrings of a kernel's name), first match wins; memcpy and memset events are copies and fills
KERNEL_CLASSES = (
    ("NCCL", ("nccl",)),
    ("attention", ("flash", "fmha", "attention", "sdpa", "cudnn")),
    ("matmul", ("gemm", "cutlass", "nvjet", "cublas", "xmma", "matmul")),
    ("compiled (Triton)", ("triton",)),
    ("copy and fill", ("copy", "fill", "memcpy", "memset")),
)
DEVICE_EVENTS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCHES = ("cuda_runtime", "cuda_driver")


def kernel_class(event: dict) -> str:
    if event.get("cat") in ("gpu_memcpy", "gpu_memset"):
        return "copy and fill"
    name = event.get("name", "").lower()
    return next((cls for cls, keys in KERNEL_CLASSES if any(key in name for key in keys)), "other")


def step_profile(events: list[dict], steps: int) -> dict:
    """Per step: each part's host and device milliseconds and calls, each kernel class's device
    milliseconds, and the device's busy milliseconds, from a Chrome trace's events."""
    spans = sorted(
        (e["ts"], e["ts"] + e["dur"], e["name"]) for e in events
        if e.get("ph") == "X" and e.get("cat") == "user_annotation" and e.get("name") in PARTS
    )  # fmt: skip
    host, calls = defaultdict(float), Counter()
    for start, end, name in spans:
        host[name] += end - start
        calls[name] += 1
    launched_at = {e["args"]["correlation"]: e["ts"] for e in events if e.get("cat") in LAUNCHES and "correlation" in e.get("args", {})}
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") in DEVICE_EVENTS]
    device, classes = defaultdict(float), defaultdict(float)
    for kernel in kernels:
        launch = launched_at.get(kernel.get("args", {}).get("correlation"))
        device[_innermost(spans, launch) if launch is not None else OUTSIDE] += kernel["dur"]
        classes[kernel_class(kernel)] += kernel["dur"]
    host_ms, device_ms, classes_ms = ({name: round(us / 1e3 / steps, 3) for name, us in table.items()} for table in (host, device, classes))
    return {
        "parts": {name: {"host_ms": host_ms[name], "device_ms": device_ms.get(name, 0.0), "calls": calls[name]}
                  for name in PARTS if name in host_ms},
        "device_outside_parts_ms": device_ms.get(OUTSIDE, 0.0),
        "kernel_classes_ms": dict(sorted(classes_ms.items(), key=lambda item: -item[1])),
        "device_busy_ms": round(_union_us([(k["ts"], k["ts"] + k["dur"]) for k in kernels]) / 1e3 / steps, 3),
        "kernels_per_step": round(len(kernels) / steps, 1),
    }  # fmt: skip


def _innermost(spans: list[tuple[float, float, str]], ts: float) -> str:
    """The part whose span holds `ts` and started last (spans sorted by start)."""
    holding = [name for start, end, name in spans if start <= ts <= end]
    return holding[-1] if holding else OUTSIDE


def _union_us(intervals: list[tuple[float, float]]) -> float:
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def profiled(run_steps, steps: int, cuda: bool, trace: Path) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    sync()
    with profile(activities=activities) as prof:
        started = time.perf_counter()
        run_steps()
        sync()
        wall = time.perf_counter() - started
    prof.export_chrome_trace(str(trace))
    result = step_profile(json.loads(trace.read_text())["traceEvents"], steps)
    result["wall_ms"] = round(wall * 1e3 / steps, 3)
    return result


def measure(options) -> dict:
    import torch

    from trainer import distributed
    from trainer.stop import StopRequest

    cuda = options.device == "cuda"
    compiled = cuda if options.compile is None else options.compile
    d = distributed.init(options.device, 600)
    shape = SHAPES[options.shape]
    env = {"device": torch.cuda.get_device_name(d.device) if cuda else "cpu", "torch": torch.__version__,
           "cuda": torch.version.cuda, "shape": shape, "vocab": options.vocab, "batch": options.batch,
           "compiled": compiled, "steps": options.steps}  # fmt: skip
    print("[ENV] " + json.dumps(env), flush=True)
    results = {"env": env, "cases": {}}
    with tempfile.TemporaryDirectory(prefix="profile-step-") as tmp:
        tmp = Path(tmp)
        flags = ["--compile" if compiled else "--no-compile"]
        case, trainer, _ = trainer_case("trainer", options.vocab, options.batch, d, StopRequest(), tmp, flags, shape, options.steps)
        env["trainer_compiled"] = trainer.step.compiled is not trainer.step.ddp
        refs, _ = reference_cases(options.vocab, options.batch, compiled, shape=shape, device=d.device)
        reference = refs[0]
        for warm in (case, reference):
            for _ in range(options.warmup):
                warm.step()
        runs = {case.name: trainer._train_epoch, reference.name: lambda: [reference.step() for _ in range(options.steps)]}
        for name, run_steps in runs.items():
            results["cases"][name] = profiled(run_steps, options.steps, cuda, tmp / "trace.json")
            print(f"[PROFILE] {name}: " + json.dumps(results["cases"][name]), flush=True)
    distributed.shutdown()
    return results


def markdown(results: dict) -> str:
    """The part table and the kernel-class table, the trainer's column beside the reference's."""
    (trainer_name, trainer), (ref_name, ref) = results["cases"].items()
    lines = [f"| part (ms per step) | {trainer_name}: host | device | {ref_name}: host | device |", "| --- | --- | --- | --- | --- |"]
    on_device = trainer["kernels_per_step"] > 0  # on the CPU the host's time is the compute: no device column

    def cells(part: dict | None) -> str:
        if part is None:
            return "- | -"
        return f"{part['host_ms']:.3f} | " + (f"{part['device_ms']:.3f}" if on_device else "-")

    for name in PARTS:
        mine, theirs = trainer["parts"].get(name), ref["parts"].get(name)
        if mine or theirs:
            lines.append(f"| {name.removeprefix('part: ')} | {cells(mine)} | {cells(theirs)} |")
    outside = [f"{case['device_outside_parts_ms']:.3f}" for case in (trainer, ref)]
    lines.append(f"| kernels outside every part | | {outside[0]} | | {outside[1]} |")
    step = [f"{case['wall_ms']:.3f} | {case['device_busy_ms']:.3f}" for case in (trainer, ref)]
    lines.append(f"| the step: wall, device busy | {step[0]} | {step[1]} |")
    lines += ["", f"| kernel class (device ms per step) | {trainer_name} | {ref_name} |", "| --- | --- | --- |"]
    for cls in dict.fromkeys([*trainer["kernel_classes_ms"], *ref["kernel_classes_ms"]]):
        lines.append(f"| {cls} | {trainer['kernel_classes_ms'].get(cls, 0.0):.3f} | {ref['kernel_classes_ms'].get(cls, 0.0):.3f} |")
    lines.append(f"| kernels per step | {trainer['kernels_per_step']} | {ref['kernels_per_step']} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None, help="cuda where there is one")
    parser.add_argument("--shape", choices=sorted(SHAPES), default=None, help="gpt2 on cuda, small on the cpu")
    parser.add_argument("--vocab", type=int, default=None, help="50257 (GPT-2's) on cuda, 512 on the cpu")
    parser.add_argument("--batch", type=int, default=None, help="micro-batch: 16 on cuda, 4 on the cpu")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None, help="on cuda by default")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=10, help="profiled steps: the trainer's epoch holds exactly these")
    parser.add_argument("--json", type=Path, help="write all figures here")
    options = parser.parse_args()
    import torch

    cuda = torch.cuda.is_available() if options.device is None else options.device == "cuda"
    options.device = "cuda" if cuda else "cpu"
    options.shape = options.shape or ("gpt2" if cuda else "small")
    options.vocab = options.vocab or (50257 if cuda else 512)
    options.batch = options.batch or (16 if cuda else 4)
    results = measure(options)
    if options.json:
        options.json.write_text(json.dumps(results, indent=1))
    print()
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
