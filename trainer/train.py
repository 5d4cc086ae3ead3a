"""Training processes' main: `python -m trainer.train TASK [flags]`, normally under torchrun. TASK is a
built-in task (smoke, lm), a task an installed package names (entry points `ddp_infra.tasks`), or
`module:factory`; a user's task takes its own options as `--task-option KEY=VALUE` (docs/trainer.md).

The run directory is <--out-dir>/<--run-name> (env OUT_DIR, RUN_NAME): it must stay the same across
restarts, since that is where a restarted process finds the checkpoint to resume from.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import sys
from pathlib import Path

import torch
from torch.distributed.elastic.multiprocessing.errors import record

from trainer import contract as c
from trainer import compile_cache, console, distributed, tracking
from trainer.arguments import seconds
from trainer.tasks.lm import task as lm_task
from trainer.tasks import smoke
from trainer.tasks.checks import check_task
from trainer.tasks.task import Task
from trainer.tasks.options import TaskOptions
from trainer.tasks.registry import make_user_task
from trainer.hang_watch import HangLimits, HangWatch, own_pod
from trainer.loop import Stopped, Trainer
from trainer.outputs import RunDir
from trainer.stop import EXIT_STOPPED, StopRequest
from trainer.throughput import COMPILE_MODES, GRAD_COMPRESSION
from trainer.train_config import TrainConfig

TASKS = {"smoke": smoke, "lm": lm_task}


# Per-task defaults of the common flags: the smoke test keeps seed 001's, the LM gets LM-like ones.
TASK_DEFAULTS = {
    "smoke": dict(batch=256, lr=3e-3, grad_clip=0.0, warmup_steps=0, weight_decay=0.0),
    "lm": dict(batch=16, lr=3e-4, grad_clip=1.0, warmup_steps=20, weight_decay=0.1, adam_betas=(0.9, 0.95)),
}
# ...and a user's task's, each a flag its stack can set
USER_TASK_DEFAULTS = dict(batch=32, lr=1e-3, grad_clip=0.0, warmup_steps=0, weight_decay=0.0)


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, help="per process, per micro-batch")
    parser.add_argument("--lr", type=float)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step")
    parser.add_argument("--weight-decay", type=float, help="AdamW's, on the 2-D weights of matmuls only")
    parser.add_argument("--adam-betas", type=float, nargs=2, default=(0.9, 0.999), metavar=("BETA1", "BETA2"),
                        help="AdamW's betas; the lm task's default is (0.9, 0.95)")  # fmt: skip
    parser.add_argument("--warmup-steps", type=int)
    parser.add_argument("--grad-clip", type=float, help="0: no clipping")
    parser.add_argument("--out-dir", type=Path, default=c.claim_dir(c.OUT_DIR, c.OUT_MOUNT))
    parser.add_argument("--run-name", default=os.environ.get(c.RUN_NAME.name) or "local")
    parser.add_argument("--checkpoint-every", type=int, default=100, help="optimizer steps; 0: at epoch ends only")
    parser.add_argument("--checkpoint-every-seconds", type=seconds, default=0.0,
                        help="also checkpoint when this long has passed since the last one; 0: not by time")  # fmt: skip
    parser.add_argument("--keep-checkpoints", type=int, default=3)
    parser.add_argument("--log-every", type=int, default=10, help="optimizer steps between [TRAIN] lines")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader worker processes (they use /dev/shm)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--no-amp", action="store_true", help="train in fp32 on GPU too")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction,
                        help="torch.compile the model (default: on CUDA only; the first steps then compile)")  # fmt: skip
    parser.add_argument("--compile-mode", choices=COMPILE_MODES, default="default",
                        help="torch.compile's mode; any but default compiles on the CPU too. max-autotune-no-cudagraphs "
                             "times kernel choices at the first steps (minutes) for faster steps after")  # fmt: skip
    parser.add_argument("--no-tf32", action="store_true", help="full fp32 matmuls on GPU instead of TF32")
    parser.add_argument("--grad-compression", choices=tuple(GRAD_COMPRESSION), default="none",
                        help="bf16: all-reduce gradients in bf16, half the bytes on the network (default none)")  # fmt: skip
    parser.add_argument("--pg-timeout", type=float, default=1800, help="seconds a collective may wait for a peer")
    parser.add_argument("--batch-seconds", type=seconds, default=0.0,
                        help="seconds each training micro-batch also waits, as a rank waits on its GPU's work (0: none): "
                             "a pace of steps that a loaded machine leaves unchanged, with little CPU spent")  # fmt: skip
    parser.add_argument("--sample-record", type=Path, metavar="DIR",
                        help="write the ids of the samples each rank trains, step by step, to DIR/<world>-rank<rank>.jsonl "
                             "(trainer/sample_record.py), for tests that check what an elastic run trained; default off")  # fmt: skip
    limits = HangLimits.from_env()
    parser.add_argument("--hang-timeout-floor", type=seconds, default=limits.floor_s,
                        help=f"seconds without progress that always count as a slow step, never a hang (env {c.HANG_TIMEOUT_FLOOR.name})")  # fmt: skip
    parser.add_argument("--hang-timeout-ceiling", type=seconds, default=limits.ceiling_s,
                        help=f"seconds without progress that always count as a hang: the world is torn down and re-formed "
                             f"from its newest checkpoint; 0: no hang detection (env {c.HANG_TIMEOUT_CEILING.name})")  # fmt: skip


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m trainer.train", description=__doc__)
    subparsers = parser.add_subparsers(dest="task", required=True, metavar="TASK")
    for name, module in TASKS.items():
        sub = subparsers.add_parser(name, help=module.__doc__.splitlines()[0])
        add_common_arguments(sub)
        module.add_arguments(sub)
        sub.set_defaults(**TASK_DEFAULTS[name])
    if argv and argv[0] not in TASKS and not argv[0].startswith("-"):
        sub = subparsers.add_parser(argv[0], help="a user's task")
        add_common_arguments(sub)
        sub.add_argument("--task-option", action="append", default=[], metavar="KEY=VALUE",
                         help="an option of the task's own, read by its factory (repeat for each)")  # fmt: skip
        sub.set_defaults(**USER_TASK_DEFAULTS)
    args = parser.parse_args(argv)
    if args.compile is False and args.compile_mode != "default":
        parser.error(f"--compile-mode {args.compile_mode} compiles the step and --no-compile does not: give one or the other")
    return args


def make_task(args: argparse.Namespace, d: distributed.Dist) -> Task:
    """The run's task, checked against the contract an exact run needs (trainer/tasks/checks.py)."""
    if args.task in TASKS:
        task = TASKS[args.task].make_task(args)
        card = {"task": args.task}
    else:
        options = TaskOptions.parse(args.task_option)
        task = make_user_task(args.task, TASKS, options, args.seed, c.claim_dir(c.DATA_DIR, c.DATA_MOUNT))
        card = {"task": args.task, "task_options": options.as_dict()}
    return check_task(dataclasses.replace(task, card={**card, **task.card}), args.task, d)


def config_of(args: argparse.Namespace) -> TrainConfig:
    return TrainConfig(
        epochs=args.epochs, batch=args.batch, lr=args.lr, seed=args.seed, grad_accum=args.grad_accum,
        weight_decay=args.weight_decay, betas=tuple(args.adam_betas), warmup_steps=args.warmup_steps, grad_clip=args.grad_clip,
        checkpoint_every=args.checkpoint_every, checkpoint_every_seconds=args.checkpoint_every_seconds,
        keep_checkpoints=args.keep_checkpoints,
        log_every=args.log_every, workers=args.workers, amp=not args.no_amp,
        compile=True if args.compile_mode != "default" else args.compile, compile_mode=args.compile_mode,
        tf32=not args.no_tf32, grad_compression=args.grad_compression, batch_seconds=args.batch_seconds,
    )  # fmt: skip


def train(args: argparse.Namespace, d: distributed.Dist, stop: StopRequest) -> None:
    task = make_task(args, d)
    run = RunDir(args.out_dir / args.run_name)
    compile_cache.keep_in(run.compile_cache)  # before anything compiles
    trainer = Trainer(task, d, config_of(args), run, stop, args.run_name, sample_record=args.sample_record)
    trainer.resume()
    trackers = (tracking.open_trackers(run.root, args.run_name, vars(args), trainer.progress.global_step, stop)
                if d.is_main else tracking.NO_TRACKERS)  # fmt: skip
    pods = distributed.every_rank(own_pod())  # for the hang watch's and the straggler's names
    watch = HangWatch(d.rank, pods, HangLimits(args.hang_timeout_floor, args.hang_timeout_ceiling), evidence_dir=run.hangs)
    with trackers, watch:
        trainer.trackers, trainer.watch = trackers, watch
        trackers.log_result(trainer.fit())


@record  # torchrun then reports a worker's traceback instead of only its exit code
def main(argv: list[str]) -> int:
    args = parse_args(argv)
    stop = StopRequest()  # armed by the training loop; before it, SIGTERM ends the process as usual
    random.seed(args.seed)
    torch.manual_seed(args.seed)  # the same initial weights on every rank; the trainer then gives each rank its own stream
    d = distributed.init(args.device, args.pg_timeout)
    # global_rank is torch's RANK; pod_index is the pod it runs in (NODE_RANK), as the pod's first [DDP] line says
    pod_index = os.environ.get(c.NODE_RANK.name) or "?"
    console.line(f"[DDP] process global_rank={d.rank} local_rank={d.local_rank} pod_index={pod_index} "
          f"world_size={d.world_size} device={d.device} run={args.run_name} threads={torch.get_num_threads()}")  # fmt: skip
    try:
        train(args, d, stop)
        code = 0
    except Stopped as stopped:
        if d.is_main:
            console.line(f"[STOP] {stopped}; checkpoint written, exiting {EXIT_STOPPED} so the run resumes")
        code = EXIT_STOPPED
    except BaseException:
        # A failed collective means a peer is gone: tearing the group down could wait on it, and a
        # SIGTERM from torchrun (closing this world to restart it) must now end the process at once.
        stop.uninstall()
        raise
    distributed.shutdown()  # after train() returned, so the model's DDP wrapper no longer holds the group
    return code

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
