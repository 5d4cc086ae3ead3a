"""GPU benchmark of the trainer's `lm` path against a nanoGPT-class loop (a measurement, not a test).

Side by side in one run, on one CUDA device, GPT-2-small shape (12 layers, 12 heads, 768 wide,
sequence 1024), the same micro-batch, synthetic tokens:
  - trainer: the `lm` task's model (trainer/tasks/lm/model.py, vocabulary padded to a multiple of 64), its
    throughput path as the `lm` flags leave it on CUDA (torch.compile, fused AdamW with decay/no-decay
    groups, TF32, bf16 autocast, DDP with bucket views), DataLoader, and the figures synced every
    --log-every steps, built by trainer.loop.Trainer from the `lm` task's flags, under the trainer's
    own process group (trainer.distributed.init: NCCL, world size 1; under torchrun it joins
    torchrun's group). The `lm` flags fix the byte tokenizer (vocab 257), so the GPT-2 vocab (50257,
    padded to 50304 as nanoGPT does) is built with trainer.tasks.lm.model directly and the rest of the Task is the
    `lm` task's; a second trainer row is the shape the flags reach (vocab 257, via lm.make_task).
  - reference: nanoGPT's loop on the same GPT module: bf16 autocast, torch.compile, fused AdamW with
    decay on 2-D weights only, TF32 on, grad clip 1.0, prefetched pinned batches, no host sync per
    step; and the same loop uncompiled, to separate what compile buys from what the loop costs.
MFU is the trainer's own (trainer/flops.py): nanoGPT's estimate_mfu, FLOPs/token = 6N + 12*L*H*Q*T
(N: parameters less the position embedding), against the GPU's dense bf16 peak from the trainer's
table (H100 SXM and H200: 989 TFLOP/s), and against the bf16 matmul rate measured here.
With --e2e it first runs the trainer as a user would (`python -m trainer.train smoke`, and
`torchrun ... -m trainer.train lm` on generated JSONL, then again to resume), and reports each outcome.
With --ablate it adds rows that price the differences: the trainer with --no-compile, the trainer with
its loss outside the compiled graph (its step before the two were compiled as one), the compiled
reference wrapped in DDP (the trainer always is, in a world of one too), and the eager reference with
a host sync per step. With --compile-modes it adds the trainer with each --compile-mode. A case that
fails at its first steps is reported by name, and the others are timed.
Without CUDA it prints why and exits 0.

Usage: python bench/bench_gpu.py [--e2e] [--ablate] [--compile-modes MODE...] [--batch 16] [--json PATH]
   or: torchrun --standalone --nproc-per-node 1 bench/bench_gpu.py [...]
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

from report import on_a_gpu, print_table  # bench/report.py: the scripts run with bench/ on sys.path

REPO = Path(__file__).resolve().parents[1]
GPT2 = dict(n_layer=12, n_head=12, d_model=768, seq_len=1024)
SMALL = dict(n_layer=2, n_head=2, d_model=64, seq_len=64)  # the GPU scripts' shape on the CPU, a check of them
VOCAB_MULTIPLE = 64  # the lm task's padding (trainer/tasks/lm/task.py)
TRAINER = "trainer lm V=50257 (50304)"
LOSS_OUTSIDE = "trainer, loss outside the compiled graph"


# --- end to end: the trainer as a user runs it -----------------------------------------------------
def write_jsonl(path: Path, documents: int, words: int, seed: int) -> None:
    """A corpus the lm task reads: `documents` lines of `words` words each."""
    rng = random.Random(seed)
    vocabulary = ["the", "model", "trains", "on", "text", "and", "tokens", "gpu", "loss", "falls", "step", "a"]
    with open(path, "w", encoding="utf-8") as file:
        for _ in range(documents):
            file.write(json.dumps({"text": " ".join(rng.choice(vocabulary) for _ in range(words))}) + "\n")


def _run(name: str, argv: list[str], timeout: int, log) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    started = time.perf_counter()
    try:
        result = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
        rc, out, err = result.returncode, result.stdout, result.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = "timeout", (exc.stdout or b"").decode(errors="replace"), (exc.stderr or b"").decode(errors="replace")
    seconds = time.perf_counter() - started
    log.write(f"\n===== {name}: rc={rc} {seconds:.1f}s\n$ {' '.join(argv)}\n--- stdout\n{out}\n--- stderr\n{err}\n")
    log.flush()
    lines = out.splitlines()
    return {
        "name": name, "rc": rc, "seconds": round(seconds, 1),
        "done": next((line for line in lines if line.startswith("[DONE]")), None),
        "resumed": next((line for line in lines if line.startswith("[CKPT] resumed")), None),
        "train_lines": [line for line in lines if line.startswith(("[TRAIN]", "[EPOCH]"))][-3:],
        "stderr_tail": "\n".join(err.splitlines()[-25:]) if rc != 0 else "",
        "warnings": sorted({line.strip()[:200] for line in err.splitlines() if "Warning" in line})[:6],
    }  # fmt: skip


def end_to_end(log_path: Path) -> list[dict]:
    py = sys.executable
    torchrun = [py, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1"]
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-gpu-e2e-") as tmp, open(log_path, "w") as log:
        work = Path(tmp)
        data = work / "data"
        data.mkdir()
        write_jsonl(data / "train.jsonl", 600, 60, 1)  # ~220 KB: ~1700 blocks of 129 bytes
        write_jsonl(data / "val.jsonl", 60, 60, 2)
        out = ["--out-dir", str(work / "out")]
        lm = ["lm", "--data-dir", str(data), *out, "--batch", "32", "--seq-len", "128", "--log-every", "10"]
        runs = [
            ("smoke (python -m, HashStore world of 1)", [py, "-m", "trainer.train", "smoke", *out, "--run-name", "smoke"], 180),
            ("smoke (torchrun, 1 proc)", [*torchrun, "-m", "trainer.train", "smoke", *out, "--run-name", "smoke-tr"], 180),
            ("lm epoch 1 (torchrun, grad-accum 2, ckpt every 10)",
             [*torchrun, "-m", "trainer.train", *lm, "--run-name", "lm", "--epochs", "1", "--grad-accum", "2",
              "--checkpoint-every", "10"], 240),
            ("lm resume to epoch 2 (torchrun)",
             [*torchrun, "-m", "trainer.train", *lm, "--run-name", "lm", "--epochs", "2", "--grad-accum", "2",
              "--checkpoint-every", "10"], 240),
            ("lm GPT-2-small shape, seq 1024 (python -m, 1 epoch)",
             [py, "-m", "trainer.train", "lm", "--data-dir", str(data), *out, "--run-name", "lm-gpt2", "--epochs", "1",
              "--n-layer", "12", "--n-head", "12", "--d-model", "768", "--seq-len", "1024", "--batch", "16",
              "--log-every", "5"], 240),
        ]  # fmt: skip
        for name, argv, timeout in runs:
            result = _run(name, argv, timeout, log)
            results.append(result)
            print(f"[E2E] {name}: rc={result['rc']} in {result['seconds']}s", flush=True)
        lm_dir = work / "out" / "lm"
        listing = sorted(str(p.relative_to(lm_dir)) for p in lm_dir.rglob("*")) if lm_dir.exists() else []
        log.write("\n===== lm run directory\n" + "\n".join(listing) + "\n")
        results.append({"name": "lm run directory", "files": listing})
    return results


# --- the benchmark -----------------------------------------------------------------------------------
class Case:
    """A named step function timed in windows; tokens per step; the model it trains (for FLOPs)."""

    def __init__(self, name, step, tokens, model, finish=None):
        self.name, self.step, self.tokens, self.model, self.finish = name, step, tokens, model, finish
        self.window_ms: list[float] = []
        self.peak_gib = 0.0
        self.first_step_s = math.nan


def trainer_case(name, vocab, batch, d, stop, tmp: Path, extra_flags=(), shape=GPT2, steps_per_epoch=8):
    """The trainer's `lm` path: Trainer(...) from the lm flags (and `extra_flags`), stepping as Trainer._train_epoch does."""
    import torch

    from trainer import train
    from trainer.tasks.lm import task as lm
    from trainer.distributed import sum_across
    from trainer.tasks.lm.model import GPT, GPTConfig
    from trainer.loop import Trainer
    from trainer.step import StepWindow
    from trainer.outputs import RunDir
    from trainer.tasks.task import Task, save_state_dict

    flags = ["lm", "--n-layer", str(shape["n_layer"]), "--n-head", str(shape["n_head"]), "--d-model", str(shape["d_model"]),
             "--seq-len", str(shape["seq_len"]), "--batch", str(batch), "--out-dir", str(tmp), "--run-name", name,
             "--data-dir", str(tmp / "data"), "--checkpoint-every", "0", *extra_flags]  # fmt: skip
    args = train.parse_args(flags)
    torch.manual_seed(args.seed)  # as train.main does
    blocks = steps_per_epoch * batch  # the loader is re-iterated
    if vocab is None:  # the shape the lm flags reach: byte tokenizer, from JSONL, via lm.make_task
        data = tmp / "data"
        data.mkdir(exist_ok=True)
        rng = random.Random(0)
        letters = "abcdefghijklmnopqrstuvwxyz      .,"
        for file, count in (("train.jsonl", blocks), ("val.jsonl", 2)):
            with open(data / file, "w") as f:
                for _ in range(count):
                    f.write(json.dumps({"text": "".join(rng.choice(letters) for _ in range(args.seq_len))}) + "\n")
        task = lm.make_task(args)
    else:
        cfg = GPTConfig(vocab, args.seq_len, args.n_layer, args.n_head, args.d_model, args.dropout, VOCAB_MULTIPLE)
        gen = torch.Generator().manual_seed(0)
        train_set = torch.randint(vocab, (blocks, args.seq_len + 1), generator=gen)
        val_set = torch.randint(vocab, (2, args.seq_len + 1), generator=gen)
        model = GPT(cfg)
        task = Task(model, train_set, val_set, lm._next_token_loss, "tokens", save_state_dict, {}, model.flops_per_token())
    trainer = Trainer(task, d, train.config_of(args), RunDir(tmp / name), stop, name)
    trainer.step.ddp.train()

    def forever():
        epoch = 0
        while True:
            trainer.sampler.set_epoch(epoch)
            yield from trainer.loader
            epoch += 1

    batches = forever()
    last = {"window": StepWindow(d.device)}

    def step():
        window = last["window"]
        trainer.step(batches, window)  # the loop's own step: compile, AMP, fused AdamW, clip, DDP
        if window.steps % trainer.cfg.log_every == 0:  # as _train_epoch does: one sync per log interval
            total, units, _ = sum_across(d, [window.loss_sum, window.units, float(stop.requested)])
            last["loss"], last["window"] = total / units, StepWindow(d.device)

    path = {
        "amp_dtype": str(trainer.step.amp_dtype), "grad_scaler_enabled": trainer.step.scaler.is_enabled(),
        "optimizer": type(trainer.step.optimizer).__name__,
        "optimizer_fused": trainer.step.optimizer.defaults.get("fused"), "optimizer_foreach": trainer.step.optimizer.defaults.get("foreach"),
        "param_groups": [(len(g["params"]), g["weight_decay"]) for g in trainer.step.optimizer.param_groups],
        "betas": trainer.cfg.betas, "grad_clip": trainer.cfg.grad_clip, "ddp": type(trainer.step.ddp).__name__,
        "compiled": trainer.step.compiled is not trainer.step.ddp, "tf32": torch.backends.cuda.matmul.fp32_precision,
        "vocab": task.model.cfg.vocab_size, "padded_vocab": task.model.cfg.padded_vocab, "batch": batch, "lr_warmup_steps": trainer.cfg.warmup_steps,
    }  # fmt: skip
    case = Case(name, step, batch * args.seq_len, task.model, finish=lambda: last.get("loss"))
    return case, trainer, path


def loss_outside_the_graph(trainer) -> None:
    """The trainer's step as it was before its loss joined the compiled forward (trainer/throughput.py,
    ModelWithLoss): the model compiled inside DDP, the loss eager. `trainer` was made with --no-compile."""
    import torch

    forward = trainer.step.ddp.module
    forward.model = torch.compile(forward.model)


def reference_cases(vocab, batch, compiled_too=True, ablate=False, shape=GPT2, device=None, ddp=False):
    """nanoGPT's train.py loop around the same GPT module: one model and optimizer, compiled and eager steps.
    Its parts are named as the trainer's are (trainer/profiling.py), for bench/profile_step.py. With `ddp`,
    the module is wrapped in DDP as nanoGPT wraps it for more than one GPU (the names say so)."""
    import torch
    import torch.nn.functional as F

    from trainer import profiling
    from trainer.profiling import part
    from trainer.tasks.lm.model import GPT, GPTConfig

    device = device or torch.device("cuda", torch.cuda.current_device())
    cuda = device.type == "cuda"
    torch.manual_seed(1337)
    model = GPT(GPTConfig(vocab, shape["seq_len"], shape["n_layer"], shape["n_head"], shape["d_model"], 0.0, VOCAB_MULTIPLE))
    model = model.to(device)

    class WithLoss(torch.nn.Module):  # nanoGPT computes the loss inside the compiled forward
        def __init__(self, gpt):
            super().__init__()
            self.gpt = gpt

        def forward(self, x, y):
            logits = self.gpt(x)
            return F.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1), ignore_index=-1)

    eager = WithLoss(model)
    if ddp:  # in the trainer's process group; bucket views, as the trainer's
        eager = torch.nn.parallel.DistributedDataParallel(eager, device_ids=[device.index] if cuda else None,
                                                          gradient_as_bucket_view=True)  # fmt: skip
    fast = torch.compile(eager)
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]  # fmt: skip
    optimizer = torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), fused=True)
    scaler = torch.amp.GradScaler(device.type, enabled=False)  # bf16: nanoGPT's scaler is a no-op
    gen = torch.Generator().manual_seed(0)
    pool = [torch.randint(vocab, (batch, shape["seq_len"] + 1), generator=gen) for _ in range(8)]
    pool = [block.pin_memory() for block in pool] if cuda else pool
    state = {"i": 0, "it": 0, "loss": torch.zeros((), device=device)}

    def get_batch():
        block = pool[state["i"] % len(pool)]
        state["i"] += 1
        block = block.to(device, non_blocking=True)
        return block[:, :-1], block[:, 1:]

    state["xy"] = get_batch()

    def make_step(forward, sync=False):
        def step():
            it = state["it"]
            lr = 6e-4 * min(1.0, (it + 1) / 20)  # nanoGPT's warm-up; a Python float, no sync
            for group in optimizer.param_groups:
                group["lr"] = lr
            x, y = state["xy"]
            with torch.autocast("cuda", dtype=torch.bfloat16) if cuda else nullcontext(), part(profiling.FORWARD):
                loss = forward(x, y)
            with part(profiling.DATA):
                state["xy"] = get_batch()  # prefetch while the GPU works
            with part(profiling.BACKWARD):
                scaler.scale(loss).backward()
            with part(profiling.CLIP):
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            with part(profiling.OPTIMIZER):
                scaler.step(optimizer)
                scaler.update()
            with part(profiling.ZERO_GRAD):
                optimizer.zero_grad(set_to_none=True)
            state["loss"] = loss.detach()
            state["it"] = it + 1
            if sync:  # as the trainer's per-step all-reduce of the loss does: wait for the GPU
                float(state["loss"])

        return step

    finish = lambda: float(state["loss"])  # noqa: E731
    tokens = batch * shape["seq_len"]
    cases = []
    wrapped = " + DDP" if ddp else ""
    if compiled_too:
        cases.append(Case(f"reference{wrapped} (compile)", make_step(fast), tokens, model, finish=finish))
    cases.append(Case(f"reference{wrapped} (eager)", make_step(eager), tokens, model, finish=finish))
    if ablate:
        cases.append(Case("ref eager + per-step sync", make_step(eager, sync=True), tokens, model, finish=finish))
    return cases, (model, optimizer, fast, eager)


def matmul_ceiling() -> float:
    """bf16 8192^3 product on random data, TFLOP/s (median of 10 after 3 warm-ups)."""
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    times = []
    for i in range(13):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        end.synchronize()
        if i >= 3:
            times.append(start.elapsed_time(end) / 1e3)
    return 2 * 8192**3 / statistics.median(times) / 1e12


def fp16_scaler_check(d, stop, tmp: Path) -> dict:
    """The fp16 + GradScaler path, which the trainer picks only without bf16: forced here by replacing
    step.amp_dtype for one small Trainer (grad-accum 2, clip 1.0), 60 steps on learnable tokens."""
    import torch

    from trainer import loop, step, train
    from trainer.tasks.lm import task as lm
    from trainer.distributed import sum_across
    from trainer.tasks.lm.model import GPT, GPTConfig
    from trainer.outputs import RunDir
    from trainer.tasks.task import Task, save_state_dict

    args = train.parse_args(["lm", "--batch", "16", "--seq-len", "128", "--grad-accum", "2", "--warmup-steps", "5",
                             "--lr", "1e-3", "--out-dir", str(tmp), "--run-name", "fp16"])  # fmt: skip
    torch.manual_seed(0)
    period = torch.arange(args.seq_len + 1 + 64) % 17  # a repeating pattern: the loss must fall
    blocks = torch.stack([period[i % 64 : i % 64 + args.seq_len + 1] for i in range(2048)])
    cfg = GPTConfig(257, args.seq_len, args.n_layer, args.n_head, args.d_model, 0.0)
    task = Task(GPT(cfg), blocks, blocks[:32], lm._next_token_loss, "tokens", save_state_dict)
    original = step.amp_dtype
    step.amp_dtype = lambda device: torch.float16
    try:
        trainer = loop.Trainer(task, d, train.config_of(args), RunDir(tmp / "fp16"), stop, "fp16")
    finally:
        step.amp_dtype = original
    batches = iter(trainer.loader)
    losses, scales = [], []
    for _ in range(min(60, len(trainer.loader))):
        window = step.StepWindow(d.device)
        trainer.step(batches, window)
        loss_sum, units, _ = sum_across(d, [window.loss_sum, window.units, 0.0])
        losses.append(loss_sum / units)
        scales.append(trainer.step.scaler.get_scale())
    val = trainer.validate()
    params_finite = all(bool(torch.isfinite(p).all()) for p in trainer.model.parameters())
    trainer.progress.global_step = len(losses)
    trainer.save_checkpoint("fp16 check")  # gather RNG states, save; then load it back as resume does
    found = trainer.store.load_newest()
    result = {
        "amp_dtype": str(trainer.step.amp_dtype), "grad_scaler_enabled": trainer.step.scaler.is_enabled(),
        "steps": len(losses), "loss_first": round(losses[0], 4), "loss_last": round(losses[-1], 4),
        "val_loss": round(val, 4), "scale_first": scales[0], "scale_last": scales[-1],
        "scale_drops": sum(1 for a, b in zip(scales, scales[1:]) if b < a), "params_finite": params_finite,
        "checkpoint_scaler_state": found[1]["scaler"] if found else None,
    }  # fmt: skip
    del trainer, task
    return result


def warm_up(cases: list[Case], steps: int, synchronize) -> dict[str, str]:
    """Each case's first `steps` steps (compilation, cuDNN/cuBLAS handles, the allocator, NCCL), its first
    one timed. A case that fails there (a compile mode this card or this torch cannot run) leaves `cases`
    and its error is returned under its name: one lever that fails costs the run its own row only."""
    failed = {}
    for case in list(cases):
        try:
            synchronize()
            started = time.perf_counter()
            case.step()
            synchronize()
            case.first_step_s = time.perf_counter() - started
            for _ in range(steps - 1):
                case.step()
            synchronize()
        except Exception as error:
            cases.remove(case)
            failed[case.name] = f"{type(error).__name__}: {error}"[:2000]
            print(f"[FAILED] {case.name}: {failed[case.name]}", flush=True)
            continue
        print(f"[WARM] {case.name}: first step {case.first_step_s:.1f}s", flush=True)
    return failed


def timed_window(case, steps: int) -> float:
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        case.step()
    end.record()
    end.synchronize()
    case.peak_gib = max(case.peak_gib, torch.cuda.max_memory_allocated() / 2**30)
    return start.elapsed_time(end) / steps


def benchmark(options) -> dict:
    import torch

    from trainer import distributed, flops
    from trainer.stop import StopRequest

    d = distributed.init("cuda", 600)  # the trainer's own group: NCCL; a world of one, or torchrun's
    if d.world_size != 1:
        raise SystemExit(f"run with one process (world size {d.world_size}): the figures are per GPU")
    torch.backends.cuda.matmul.fp32_precision = "tf32"  # the trainer's setting (trainer/throughput.py) and nanoGPT's
    torch.backends.cudnn.conv.fp32_precision = "tf32"
    props = torch.cuda.get_device_properties(d.device)
    env = {
        "device": props.name, "sms": props.multi_processor_count, "memory_gib": round(props.total_memory / 2**30, 1),
        "torch": torch.__version__, "cuda": torch.version.cuda, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
        "backend": torch.distributed.get_backend(), "world_size": d.world_size, "torchrun": "RANK" in os.environ,
        "bf16_supported": torch.cuda.is_bf16_supported(), "peak_flops": flops.peak_flops(d.device),
    }  # fmt: skip
    print("[ENV] " + " ".join(f"{k}={v}" for k, v in env.items()), flush=True)
    env["matmul_bf16_tflops"] = round(matmul_ceiling(), 1)
    print(f"[ENV] bf16 8192^3 matmul: {env['matmul_bf16_tflops']} TFLOP/s", flush=True)
    stop = StopRequest()
    results = {"env": env, "batch": options.batch, "seq_len": GPT2["seq_len"]}
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp:
        tmp = Path(tmp)
        if not options.skip_fp16:
            results["fp16_scaler_check"] = fp16_scaler_check(d, stop, tmp)
            print("[FP16] " + json.dumps(results["fp16_scaler_check"]), flush=True)
            gc.collect()
            torch.cuda.empty_cache()
        cases, keep = [], []
        case, trainer, path = trainer_case(TRAINER, options.vocab, options.batch, d, stop, tmp)
        cases.append(case)
        keep.append(trainer)
        results["trainer_path"] = path
        print("[PATH] " + json.dumps(path), flush=True)
        refs, ref_keep = reference_cases(options.vocab, options.batch, not options.no_compile, options.ablate)
        cases += refs
        keep.append(ref_keep)
        if options.ablate:  # not the trainer as it is: what its differences cost, each on its own
            case, trainer, _ = trainer_case("trainer --no-compile", options.vocab, options.batch, d, stop, tmp, ["--no-compile"])
            cases.append(case)
            keep.append(trainer)
            case, trainer, _ = trainer_case(LOSS_OUTSIDE, options.vocab, options.batch, d, stop, tmp, ["--no-compile"])
            loss_outside_the_graph(trainer)
            cases.append(case)
            keep.append(trainer)
            refs_ddp, ddp_keep = reference_cases(options.vocab, options.batch, ddp=True)
            cases.append(refs_ddp[0])  # compiled: what DDP alone costs the reference
            keep.append(ddp_keep)
        for mode in options.compile_modes:  # the trainer's step under another of torch.compile's modes
            case, trainer, _ = trainer_case(f"trainer --compile-mode {mode}", options.vocab, options.batch, d, stop, tmp,
                                            ["--compile-mode", mode])  # fmt: skip
            cases.append(case)
            keep.append(trainer)
        if not options.skip_small_vocab:
            case, trainer, _ = trainer_case("trainer lm V=257 (flags)", None, options.batch, d, stop, tmp)
            cases.append(case)
            keep.append(trainer)
        results["failed"] = warm_up(cases, options.warmup, torch.cuda.synchronize)
        for window in range(options.windows):  # interleaved, so drift hits every case alike
            for case in cases:
                    case.window_ms.append(timed_window(case, options.steps))
            print(f"[WINDOW] {window + 1}: " + ", ".join(f"{c.name} {c.window_ms[-1]:.2f} ms" for c in cases), flush=True)
        rows = []
        for case in cases:
            fpt = case.model.flops_per_token()
            ms = statistics.median(case.window_ms)
            tps = case.tokens / (ms / 1e3)
            mfu = flops.mfu(fpt, tps, env["peak_flops"])
            rows.append({
                "case": case.name, "step_ms": round(ms, 2), "step_ms_min": round(min(case.window_ms), 2),
                "step_ms_max": round(max(case.window_ms), 2), "tokens_per_s": round(tps),
                "flops_per_token": fpt, "mfu": None if mfu is None else round(mfu, 4),
                "mfu_vs_measured_matmul": round(fpt * tps / (env["matmul_bf16_tflops"] * 1e12), 4),
                "peak_mem_gib": round(case.peak_gib, 1), "first_step_s": round(case.first_step_s, 1),
                "final_loss": round(case.finish(), 4) if case.finish else None,
            })  # fmt: skip
        results["rows"] = rows
        del cases, keep, trainer, case
        gc.collect()
    distributed.shutdown()
    return results


def report_title(results: dict) -> str:
    env = results["env"]
    return (f"GPT-2-small shape (12x768, T={results['seq_len']}), micro-batch {results['batch']}, {env['device']}, "
            f"torch {env['torch']}, peak {_tflops(env['peak_flops'])} bf16, measured bf16 matmul {env['matmul_bf16_tflops']} TFLOP/s")  # fmt: skip


def report_rows(results: dict) -> list[tuple[str, str]]:
    """Each case's figures (a step: the median of its windows' mean step), the trainer against each
    reference, and the path the trainer took."""
    rows = []
    for r in results["rows"]:
        case = r["case"]
        rows += [
            (f"{case}: step", f"{r['step_ms']:.2f} ms"),
            (f"{case}: step, fastest..slowest window", f"{r['step_ms_min']:.2f}..{r['step_ms_max']:.2f} ms"),
            (f"{case}: tokens/s", f"{r['tokens_per_s']:,d}"),
            (f"{case}: MFU", _percent(r["mfu"])),
            (f"{case}: peak memory", f"{r['peak_mem_gib']:.1f} GiB"),
            (f"{case}: final loss", "n/a" if r["final_loss"] is None else f"{r['final_loss']:.3f}"),
        ]  # fmt: skip
    rows += [(f"{case}: failed", error.splitlines()[0][:160]) for case, error in results.get("failed", {}).items()]
    by = {r["case"]: r for r in results["rows"]}
    trainer = by.get(TRAINER)
    for ref_name in ("reference (compile)", "reference (eager)"):
        ref = by.get(ref_name)
        if trainer and ref:
            rows.append((f"trainer / {ref_name}: tokens/s", f"{trainer['tokens_per_s'] / ref['tokens_per_s']:.3f}"))
            rows.append((f"trainer / {ref_name}: MFU", f"{_percent(trainer['mfu'])} vs {_percent(ref['mfu'])}"))
    p = results.get("trainer_path", {})
    rows += [
        ("trainer path: amp", str(p.get("amp_dtype"))),
        ("trainer path: GradScaler enabled", str(p.get("grad_scaler_enabled"))),
        ("trainer path: AdamW fused", str(p.get("optimizer_fused"))),
        ("trainer path: groups (params, decay)", str(p.get("param_groups"))),
        ("trainer path: betas", str(p.get("betas"))),
        ("trainer path: compiled", str(p.get("compiled"))),
        ("trainer path: tf32", str(p.get("tf32"))),
        ("trainer path: vocab", f"{p.get('vocab')}->{p.get('padded_vocab')}"),
    ]  # fmt: skip
    return rows


def _percent(fraction: float | None) -> str:
    return "n/a" if fraction is None else f"{fraction:.1%}"


def _tflops(flops_per_s: float | None) -> str:
    return "unknown (not in trainer/flops.py)" if flops_per_s is None else f"{flops_per_s / 1e12:.0f} TFLOP/s"


def main() -> int:
    sys.path.insert(0, str(REPO))
    from trainer.throughput import COMPILE_MODES

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=16, help="micro-batch (sequences of 1024) for every case")
    parser.add_argument("--vocab", type=int, default=50257, help="GPT-2's; the model pads it to a multiple of 64 (50304)")
    parser.add_argument("--warmup", type=int, default=10, help="steps per case before timing")
    parser.add_argument("--steps", type=int, default=20, help="steps per timed window")
    parser.add_argument("--windows", type=int, default=3, help="timed windows per case, interleaved")
    parser.add_argument("--no-compile", action="store_true", help="leave out the compiled reference")
    parser.add_argument("--skip-small-vocab", action="store_true", help="leave out the vocab-257 trainer row")
    parser.add_argument("--skip-fp16", action="store_true", help="leave out the forced fp16 + GradScaler check")
    parser.add_argument("--ablate", action="store_true",
                        help="add rows: trainer uncompiled, trainer with its loss outside the graph; reference + DDP, + sync")
    parser.add_argument("--compile-modes", nargs="*", default=[], metavar="MODE", choices=COMPILE_MODES,
                        help="add a trainer row with each of these --compile-mode values (max-autotune-no-cudagraphs: "
                             "minutes of autotuning before its first step)")  # fmt: skip
    parser.add_argument("--e2e", action="store_true", help="first run the trainer's CLI end to end on the GPU")
    parser.add_argument("--e2e-log", type=Path, default=Path("bench-gpu-e2e.log"))
    parser.add_argument("--json", type=Path, help="write all figures here")
    options = parser.parse_args()
    if not on_a_gpu("bench_gpu"):
        return 0
    results = {}
    if options.e2e and os.environ.get("RANK", "0") == "0" and "TORCHELASTIC_RUN_ID" not in os.environ:
        results["e2e"] = end_to_end(options.e2e_log)
    results.update(benchmark(options))
    if options.json:
        options.json.write_text(json.dumps(results, indent=1, default=str))
    if "e2e" in results:
        print()
        for r in results["e2e"]:
            if "rc" in r:
                print(f"e2e {r['name']:52} rc={r['rc']} {r['seconds']:6.1f}s {r['done'] or ''}"[:240])
                if r["stderr_tail"]:
                    print("    " + r["stderr_tail"].replace("\n", "\n    ")[-2500:])
    print()
    print_table(report_title(results), report_rows(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
