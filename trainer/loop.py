"""The training loop: DDP over a Task, with validation, outputs, checkpoints, resume and stop.

Every rank runs the same sequence of collectives: beyond DDP's own, one small all-reduce (losses,
units, stop flag, checkpoint-time flag) per log interval, at a checkpoint and at an epoch's end, the
only times the host waits for the device; validation sums losses. Checkpoints are written by every
rank in the background, with collectives on a group of their own (trainer/checkpoint/sharded.py). Decisions
(checkpoint now, stop now) follow from values every rank has, so no rank waits alone. A SIGTERM, and
a checkpoint by time, are answered at the next of those syncs: within --log-every steps.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.utils.data import Subset

from trainer import console, flops, profiling, seeding
from trainer.batch_loader import batch_loader
from trainer.checkpoint.record import CheckpointReason, CheckpointRecord
from trainer.checkpoint.run_checkpoints import RunCheckpoints
from trainer.distributed import Dist, sum_across
from trainer.hang_watch import HangWatch, stragglers
from trainer.lines import DoneLine, EpochLine, NoCheckpoint, Resized, Resumed, Straggler, TrainLine
from trainer.load import params_sum, write_card
from trainer.outputs import RunDir, write_json
from trainer.profiling import part
from trainer.progress import Progress, perplexity, run_summary
from trainer.sample_record import IndexedDataset, SampleRecord
from trainer.step import OptimizerStep, StepWindow
from trainer.sampler import EpochSampler
from trainer.stop import StopRequest, answer_bound
from trainer.tasks.task import Task, set_epoch, to_device
from trainer.train_config import TrainConfig
from trainer.tracking import NO_TRACKERS, Trackers


class Stopped(Exception):
    """SIGTERM reached a rank; every rank has stopped at the same step, after a checkpoint."""


class Trainer:
    def __init__(self, task: Task, d: Dist, cfg: TrainConfig, run: RunDir, stop: StopRequest, run_name: str,
                 sample_record: Path | None = None):  # fmt: skip
        self.task, self.d, self.cfg, self.run, self.stop, self.run_name = task, d, cfg, run, stop, run_name
        self.trackers: Trackers = NO_TRACKERS  # rank 0's own, set once resume() has found the step the run goes on from
        self.watch = HangWatch.off()  # the world's hang watch, set while it trains
        self.model = task.model.to(d.device)
        # --sample-record: each sample's index goes with it through the loader to the step, which records the
        # ids it trained (trainer/sample_record.py); without it the loader reads the task's dataset as it is.
        self.sample_record = SampleRecord(sample_record, d) if sample_record else None
        self.step = OptimizerStep(task, self.model, cfg, d.device, self.sample_record)
        self.peak_flops = flops.peak_flops(d.device)
        self.sampler = EpochSampler(len(task.train_set), d.world_size, d.rank, cfg.seed, cfg.batch * cfg.grad_accum)
        pin = d.device.type == "cuda"
        # Starting an iterator draws a seed for the loader's workers: from a generator of the loaders' own, not
        # from the global RNG that dropout uses, which a resumed epoch's extra start would shift.
        loader_rng = torch.Generator().manual_seed(cfg.seed + d.rank)
        train_set = IndexedDataset(task.train_set) if self.sample_record else task.train_set
        self.loader = batch_loader(train_set, cfg.batch, sampler=self.sampler, drop_last=True, num_workers=cfg.workers,
                                   pin_memory=pin, generator=loader_rng)  # fmt: skip
        # each rank validates every world_size-th item: no padding, so the mean is over the exact set
        shard = Subset(task.val_set, range(d.rank, len(task.val_set), d.world_size))
        self.val_loader = batch_loader(shard, cfg.batch, num_workers=cfg.workers, pin_memory=pin, generator=loader_rng)
        steps_per_epoch = self.sampler.steps_left()
        if steps_per_epoch == 0:
            raise ValueError(
                f"{len(task.train_set)} samples cannot fill one step of {d.world_size} processes x "
                f"{cfg.batch} x {cfg.grad_accum}: lower --batch or --grad-accum"
            )
        self.checkpoints = RunCheckpoints(run.checkpoints, cfg.keep_checkpoints, d, cfg.checkpoint_every_seconds)
        world_step = self.sampler.world_step
        self.progress = Progress(warmup_samples=cfg.warmup_steps * world_step, epoch_samples=steps_per_epoch * world_step)
        # The model was initialized from the run's seed, the same on every rank; from here on each rank
        # draws its own dropout masks (a resume replaces this stream with the checkpoint's).
        seeding.seed_all(seeding.rank_seed(cfg.seed, d.rank, step=0))

    def _steps_in_epoch(self) -> int:
        """This epoch's steps: those done (by this or an earlier world) and those this world has left."""
        return self.progress.step_in_epoch + self.sampler.steps_after(self.progress.samples_in_epoch)

    # --- resume and checkpoints ------------------------------------------------------------
    def resume(self) -> None:
        """Load the newest complete checkpoint, the same one on every rank (rank 0 chooses)."""
        resumed = self.checkpoints.resume(self._load_checkpoint)
        if resumed is None:
            self.log(NoCheckpoint(str(self.checkpoints.store.directory)).text())
            if self.d.is_main:
                self.run.forget_metrics_from(1)
            return
        name, checkpoint = resumed
        if self.d.is_main:
            self.run.forget_metrics_from(self.progress.epoch + 1)
        p = self.progress
        where = (f"all {p.epoch} epochs done" if p.epoch >= self.cfg.epochs
                 else f"epoch {p.epoch + 1} step {p.step_in_epoch}/{self._steps_in_epoch()} "
                      f"sample {p.samples_in_epoch}/{len(self.task.train_set)}")  # fmt: skip
        resized = checkpoint.world_size != self.d.world_size
        # The rule of a resize: each process keeps its batch, so the global batch follows the world's
        # size; the learning-rate schedule goes on in samples.
        was_batch = checkpoint.world_size * checkpoint.batch * checkpoint.grad_accum
        world = Resized(self.d.world_size, checkpoint.world_size, self.sampler.world_step, was_batch) if resized else None
        # which checkpoint it was (sigterm: the world stopped where it was; periodic, time, epoch end:
        # it was lost, and what it trained after this checkpoint is trained again)
        self.log(Resumed(name, where, p.global_step, checkpoint.reason, world).text())

    def _load_checkpoint(self, shards: Path, checkpoint: CheckpointRecord) -> None:
        model, optimizer = get_state_dict(self.model, self.step.optimizer)
        state = {"model": model, "optimizer": optimizer}
        same_world = checkpoint.world_size == self.d.world_size
        if same_world:  # this rank's own streams; a resized world cannot replay the old ranks' streams
            state["rng"] = {f"rank-{self.d.rank}": seeding.rng_state(self.d.device)}
        self.checkpoints.load_shards(state, shards)
        set_state_dict(self.model, self.step.optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
        self._load_scaler_state(checkpoint.scaler)
        self.progress = Progress(**checkpoint.progress)
        if same_world:
            seeding.set_rng_state(state["rng"][f"rank-{self.d.rank}"])
        else:
            seeding.seed_all(seeding.rank_seed(self.cfg.seed, self.d.rank, step=self.progress.global_step))

    def _load_scaler_state(self, state: dict[str, Any]) -> None:
        """fp16's loss scale; a checkpoint saved in bf16 or fp32 (another GPU, the CPU) has none to give."""
        if self.step.scaler.is_enabled() and not state:
            self.log("[CKPT] the checkpoint has no loss-scaler state (saved in bf16 or fp32): fp16 starts from the initial scale")
            return
        self.step.scaler.load_state_dict(state)  # a disabled scaler (bf16, fp32) ignores an fp16 run's state

    def save_checkpoint(self, reason: CheckpointReason) -> None:
        """Called by every rank at the same step: each stages its state and writes its share in the background."""
        if self.progress.global_step == self.checkpoints.saved_step:
            return  # this step's checkpoint is written already, or being written
        model, optimizer = get_state_dict(self.model, self.step.optimizer)
        state = {"model": model, "optimizer": optimizer, "rng": {f"rank-{self.d.rank}": seeding.rng_state(self.d.device)}}
        p, cfg = self.progress, self.cfg
        checkpoint = CheckpointRecord(
            reason=reason, world_size=self.d.world_size, batch=cfg.batch, grad_accum=cfg.grad_accum,
            schedule_samples=cfg.epochs * p.epoch_samples, precision=self.step.precision,
            progress=asdict(p), scaler=self.step.scaler.state_dict(),
        )
        self.checkpoints.save(p.global_step, state, checkpoint)

    # --- training ---------------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        started = time.perf_counter()
        # from here on a SIGTERM can be answered with a checkpoint (or, stuck with a gone peer, ends the rank)
        self.stop.install(answer_within=lambda: answer_bound(self.watch.slowest_step()))
        self.step.ddp.train()
        if self.sample_record:
            self.sample_record.open(resumed_at_step=self.progress.global_step)  # one broadcast, in this opt-in record only
        last = {}
        while self.progress.epoch < self.cfg.epochs:
            epoch_started = time.perf_counter()
            epoch_units_before = self.progress.epoch_units
            self._train_epoch()
            last = self._end_epoch(time.perf_counter() - epoch_started, self.progress.epoch_units - epoch_units_before)
        if not last:  # a restart after the last epoch: report the finished run, train nothing
            val_loss = self.validate()
            p = self.progress
            last = run_summary(p.epoch, p.last_train_loss, val_loss, p.best_epoch)
        with self.watch.busy("writing the last checkpoint"):
            self.checkpoints.close()  # the last checkpoint is written and committed before the run reports done
        done = DoneLine(rank=self.d.rank, **last, run=self.run_name, steps=self.progress.global_step,
                        params_sum=params_sum(self.model), seconds=round(time.perf_counter() - started, 3))  # fmt: skip
        # every rank reports: equal lines across ranks show the replicas ended identical
        console.line(done.text())
        return done.result()

    def _train_epoch(self) -> None:
        p, cfg = self.progress, self.cfg
        self.sampler.set_epoch(p.epoch, start=p.samples_in_epoch)
        set_epoch(self.task.train_set, p.epoch)  # before the loader's workers copy it
        steps_in_epoch = self._steps_in_epoch()
        batches = iter(self.loader)
        window = StepWindow(self.d.device)
        while p.step_in_epoch < steps_in_epoch:
            lr = cfg.lr * p.lr_factor(self.sampler.world_step, cfg.epochs, cfg.min_lr_ratio)
            self.step.set_lr(lr)
            self.step(batches, window)
            if compiled := self.step.first_compiled_step():
                self.log(compiled.text())
            p.step_done(self.sampler.world_step)
            if self.sample_record:
                with part(profiling.SAMPLE_RECORD):
                    self.sample_record.step(p.global_step, p.epoch)  # written before this step can be checkpointed
            with part(profiling.HANG_WATCH):
                self.watch.beat(p.global_step)
            last = p.step_in_epoch == steps_in_epoch
            checkpoint_now = cfg.checkpoint_every and p.global_step % cfg.checkpoint_every == 0 and not last
            if not (p.step_in_epoch % cfg.log_every == 0 or last or checkpoint_now):
                continue  # the figures stay on the device: no host sync, no collective
            with part(profiling.FIGURES):
                forward_s = [0.0] * self.d.world_size
                forward_s[self.d.rank] = window.forward_seconds()  # every rank's, after the sum
                loss_sum, units, stop, time_is_up, *forward_s = sum_across(
                    self.d, [window.loss_sum, window.units, float(self.stop.requested), float(self.checkpoints.time_is_up()), *forward_s]
                )
            seconds = time.perf_counter() - window.started  # after the sync: the device's time, not the host's
            p.add_losses(loss_sum, units)
            rate = units / seconds
            mfu = flops.mfu(self.task.flops_per_unit, rate / self.d.world_size, self.peak_flops)
            line = TrainLine(p.epoch + 1, cfg.epochs, p.step_in_epoch, steps_in_epoch, p.global_step, p.samples_seen,
                             loss_sum / units, lr, self.task.unit, rate, rate / self.d.world_size,
                             seconds / window.steps * 1e3, None if mfu is None else mfu * 100, self._stragglers(forward_s))  # fmt: skip
            self.log(line.text())
            if self.d.is_main:
                with self.watch.busy("sending the figures to the trackers"):
                    self.trackers.log_train(line.global_step, line.figures())
            if stop:
                self.save_checkpoint(CheckpointReason.SIGTERM)
                with self.watch.busy("writing the SIGTERM checkpoint"):
                    self.checkpoints.close()  # exit only with the checkpoint on disk
                raise Stopped(f"stopped by SIGTERM at epoch {p.epoch + 1} step {p.step_in_epoch}, global step {p.global_step}")
            if checkpoint_now:
                self.save_checkpoint(CheckpointReason.PERIODIC)  # the epoch's last step is saved by the epoch end
            elif time_is_up and not last:
                self.save_checkpoint(CheckpointReason.TIME)
            window = StepWindow(self.d.device)

    def _end_epoch(self, seconds: float, units: float) -> dict[str, Any]:
        end = self.progress.end_epoch(self.validate())
        metrics = end.metrics(self.task.unit, units, seconds)
        if self.d.is_main:
            with self.watch.busy(f"writing epoch {end.epoch}'s model"):
                directory = self.run.epoch_dir(end.epoch)
                self.task.save(self.model, directory)
                write_card(directory, self.model, self.task.card)
                write_json(directory / "metrics.json", metrics)
                self.run.append_metrics(metrics)
                self.trackers.log_epoch(metrics)
                if end.improved:
                    self.run.mark_best(end.epoch)
        self.log(EpochLine(end.epoch, self.cfg.epochs, end.train_loss, end.val_loss, perplexity(end.val_loss), self.task.unit,
                           units / seconds, end.best_epoch).text())  # fmt: skip
        self.save_checkpoint(CheckpointReason.EPOCH_END)
        return end.summary()

    @torch.no_grad()
    def validate(self) -> float:
        self.model.eval()
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.d.device)
        units = 0
        for batch in self.val_loader:
            with self.step.autocast():
                loss, n = self.task.loss(self.model, to_device(batch, self.d.device))
            loss_sum += loss.double() * n
            units += n
            self.watch.beat()
        self.model.train()
        total, count = sum_across(self.d, [loss_sum, units])
        return total / count

    def _stragglers(self, forward_s: list[float]) -> tuple[Straggler, ...]:
        """Each rank whose forward passes were much slower, with its pod."""
        return tuple(Straggler(rank, self.watch.pods[rank], slower * 100) for rank, slower in stragglers(forward_s))

    def log(self, line: str) -> None:
        """Rank 0 speaks for the world."""
        if self.d.is_main:
            console.line(line)
