"""The trainer's tagged log lines: one definition per kind, with its tag, its fields, how it is written and
how it is read back. The loop, the checkpoint writer and the trackers write through it; observe/, the demo
and the tests read through it, so no other module knows a line's layout.

Users grep these lines: `text()` writes each exactly as the trainer always has. A record holds each figure
at the precision its line prints, so reading a line back gives the record that wrote it, and a tracked
series matches the log to the digit.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

# The beginnings of lines that are written elsewhere (the pod's entrypoint, the stop, the hang watch,
# the pre-flight check) and read only for the kind of event they announce.
REJOINING = "[DDP] re-joining"  # torchrun exited and the pod joins the next world (trainer/entrypoint.py)
TORCHRUN_STARTED = "[DDP] torchrun "  # the pod starts torchrun, which waits for the world to join
PROCESS_STARTED = "[DDP] process "  # a training process joined its world (trainer/train.py)
STOPPED = "[STOP]"  # a SIGTERM stopped the rank (trainer/train.py, trainer/stop.py)
HANG = "[HANG]"  # the hang watch's verdict (trainer/hang_watch.py)
HANG_EVIDENCE = "; the live ranks' stacks and flight records: "  # ends a [HANG] line, before its evidence directory
PREFLIGHT_WAITING = "[PREFLIGHT] waiting for"  # a pod waits for pod 0 to be reachable (trainer/pod/preflight.py)
CKPT = "[CKPT]"  # the tag of every checkpoint line below, and of the store's skipped checkpoints


def tagged(log: str, tag: str) -> list[str]:
    """The lines of a log that start with `tag` (`[DONE]`, `[TRAIN]`, `[CKPT] resumed from`), in order."""
    return [row for row in log.splitlines() if row.startswith(tag)]


def hang_evidence(row: str) -> str:
    """The evidence directory a `[HANG]` line names, without its trailing slash ("" where it names none)."""
    return row.split(HANG_EVIDENCE, 1)[1].rstrip("/") if HANG_EVIDENCE in row else ""


def key_values(row: str) -> dict[str, str]:
    """The `key=value` words of a line, as printed (a later word of the same key wins)."""
    return dict(word.split("=", 1) for word in row.split()[1:] if "=" in word)


def _printed(value: float, spec: str) -> float:
    """`value` rounded as `spec` prints it."""
    return float(format(value, spec))


def _round_fields(record: Any, specs: dict[str, str]) -> None:
    """Sets each named figure of a frozen record to the precision its line prints."""
    for name, spec in specs.items():
        value = getattr(record, name)
        if value is not None:
            object.__setattr__(record, name, _printed(value, spec))


# --- [TRAIN]: a log interval's figures, from rank 0 -------------------------------------------------
@dataclass(frozen=True)
class Straggler:
    rank: int
    pod: str
    slower_pct: float  # its forward passes' time over the world's median, in percent

    def __post_init__(self) -> None:
        _round_fields(self, {"slower_pct": ".0f"})

    def text(self) -> str:
        return f" straggler=rank{self.rank}@{self.pod}(+{self.slower_pct:.0f}%)"


_STRAGGLER = re.compile(r"rank(\d+)@(\S+)\(\+(-?\d+)%\)")


@dataclass(frozen=True)
class TrainLine:
    TAG: ClassVar[str] = "[TRAIN]"
    _SPECS: ClassVar[dict[str, str]] = {"loss": ".4f", "lr": ".6e", "rate": ".0f", "per_process": ".0f",
                                        "step_ms": ".1f", "mfu_pct": ".1f"}  # fmt: skip

    epoch: int  # 1-based, of `epochs`
    epochs: int
    step: int  # the optimizer step in the epoch, 1-based, of `steps`
    steps: int
    global_step: int
    samples: int  # seen over all epochs
    loss: float  # the interval's mean over the world
    lr: float
    unit: str  # samples or tokens, the task's unit of work
    rate: float  # units per second, the whole world
    per_process: float  # units per second, one process
    step_ms: float
    mfu_pct: Optional[float]  # model FLOPs utilization; None where the device's peak is not known
    stragglers: tuple[Straggler, ...] = ()

    def __post_init__(self) -> None:
        _round_fields(self, self._SPECS)

    def text(self) -> str:
        mfu = "n/a" if self.mfu_pct is None else f"{self.mfu_pct:.1f}%"
        return (f"{self.TAG} epoch={self.epoch}/{self.epochs} step={self.step}/{self.steps} "
                f"global_step={self.global_step} samples={self.samples} loss={self.loss:.4f} lr={self.lr:.6e} "
                f"{self.unit}/s={self.rate:.0f} per_process={self.per_process:.0f} step_ms={self.step_ms:.1f} "
                f"mfu={mfu}" + "".join(s.text() for s in self.stragglers))  # fmt: skip

    @classmethod
    def parse(cls, row: str) -> Optional[TrainLine]:
        if not row.startswith(cls.TAG):
            return None
        found = key_values(row)
        epoch, epochs = found["epoch"].split("/")
        step, steps = found["step"].split("/")
        unit = next(key[: -len("/s")] for key in found if key.endswith("/s"))
        mfu = found["mfu"]
        stragglers = tuple(Straggler(int(rank), pod, float(slower)) for rank, pod, slower in _STRAGGLER.findall(row))
        return cls(int(epoch), int(epochs), int(step), int(steps), int(found["global_step"]), int(found["samples"]),
                   float(found["loss"]), float(found["lr"]), unit, float(found[f"{unit}/s"]),
                   float(found["per_process"]), float(found["step_ms"]), None if mfu == "n/a" else float(mfu.rstrip("%")),
                   stragglers)  # fmt: skip

    def fields(self) -> dict[str, str]:
        """Each field as the line prints it, by name."""
        return key_values(self.text())

    def figures(self) -> dict[str, float]:
        """What the trackers record at `global_step`, by name."""
        figures = {"samples": float(self.samples), "loss": self.loss, "lr": self.lr, f"{self.unit}_per_s": self.rate,
                   "per_process": self.per_process, "step_ms": self.step_ms}  # fmt: skip
        if self.mfu_pct is not None:
            figures["mfu_pct"] = self.mfu_pct
        return figures

    @property
    def steps_left(self) -> int:
        """Optimizer steps until the run's end."""
        return (self.epochs - self.epoch) * self.steps + self.steps - self.step


# --- [EPOCH]: an epoch's end, from rank 0 ------------------------------------------------------------
@dataclass(frozen=True)
class EpochLine:
    TAG: ClassVar[str] = "[EPOCH]"
    _SPECS: ClassVar[dict[str, str]] = {"train_loss": ".4f", "val_ppl": ".4f", "rate": ".0f"}

    epoch: int
    epochs: int
    train_loss: float
    val_loss: float  # printed in full: equal runs show equal losses to the last bit
    val_ppl: float
    unit: str
    rate: float  # units per second over the epoch
    best_epoch: int

    def __post_init__(self) -> None:
        _round_fields(self, self._SPECS)

    def text(self) -> str:
        return (f"{self.TAG} {self.epoch}/{self.epochs} train_loss={self.train_loss:.4f} val_loss={self.val_loss!r} "
                f"val_ppl={self.val_ppl:.4f} {self.unit}/s={self.rate:.0f} best=epoch-{self.best_epoch}")  # fmt: skip

    @classmethod
    def parse(cls, row: str) -> Optional[EpochLine]:
        if not row.startswith(cls.TAG):
            return None
        epoch, epochs = row.split()[1].split("/")
        found = key_values(row)
        unit = next(key[: -len("/s")] for key in found if key.endswith("/s"))
        return cls(int(epoch), int(epochs), float(found["train_loss"]), float(found["val_loss"]), float(found["val_ppl"]),
                   unit, float(found[f"{unit}/s"]), int(found["best"].removeprefix("epoch-")))  # fmt: skip

    def summary(self) -> str:
        """The line without its tag."""
        return self.text()[len(self.TAG) :].strip()


# --- [DONE]: the run's result, from every rank -------------------------------------------------------
@dataclass(frozen=True)
class DoneLine:
    """Every rank prints one: equal lines across ranks show the replicas ended identical. Floats print
    in full (repr), so reading one back gives the same number to the last bit."""

    TAG: ClassVar[str] = "[DONE]"

    rank: int
    epochs: int
    train_loss: float
    val_loss: float
    val_ppl: float
    best: str  # epoch-<n>, the epoch of the lowest validation loss
    run: str
    steps: int  # global optimizer steps
    params_sum: float  # the weights' fingerprint (trainer/load.py)
    seconds: float

    def text(self) -> str:
        return f"{self.TAG} " + " ".join(f"{key}={value}" for key, value in dataclasses.asdict(self).items())

    @classmethod
    def parse(cls, row: str) -> Optional[DoneLine]:
        if not row.startswith(cls.TAG):
            return None
        found = key_values(row)
        kinds = {"int": int, "float": float, "str": str}
        return cls(**{f.name: kinds[f.type](found[f.name]) for f in dataclasses.fields(cls)})

    def result(self) -> dict[str, Any]:
        """The run's result, the same on every rank: the line without the rank."""
        return {key: value for key, value in dataclasses.asdict(self).items() if key != "rank"}

    def fields(self) -> dict[str, str]:
        """Each field as the line prints it, by name."""
        return key_values(self.text())


# --- [CKPT]: checkpoints saved, failed and resumed from, by rank 0 -----------------------------------
def _step_of(checkpoint: str) -> int:
    """The global step of a checkpoint named as the store names them, ckpt-<step> (trainer/checkpoint/store.py)."""
    return int(checkpoint.removeprefix("ckpt-"))


@dataclass(frozen=True)
class CheckpointSaved:
    PREFIX: ClassVar[str] = f"{CKPT} saved "
    _READ: ClassVar[re.Pattern] = re.compile(r"\[CKPT\] saved (\S+) \((.+)\): blocked the loop (\S+)s, written in (\S+)s$")
    _SPECS: ClassVar[dict[str, str]] = {"blocked_s": ".4f", "written_s": ".4f"}

    checkpoint: str  # its name
    reason: str  # a CheckpointReason (trainer/checkpoint/record.py)
    blocked_s: float  # the loop waited this long for the save to start
    written_s: float  # from the save's start until its record was committed

    def __post_init__(self) -> None:
        _round_fields(self, self._SPECS)

    @property
    def step(self) -> int:
        return _step_of(self.checkpoint)

    def text(self) -> str:
        return (f"{self.PREFIX}{self.checkpoint} ({self.reason}): blocked the loop {self.blocked_s:.4f}s, "
                f"written in {self.written_s:.4f}s")  # fmt: skip

    @classmethod
    def parse(cls, row: str) -> Optional[CheckpointSaved]:
        match = cls._READ.match(row)
        if not match:
            return None
        checkpoint, reason, blocked, written = match.groups()
        return cls(checkpoint, reason, float(blocked), float(written))


@dataclass(frozen=True)
class CheckpointNotSaved:
    """A save that failed; training goes on. Read by people only."""

    PREFIX: ClassVar[str] = f"{CKPT} could not save "

    checkpoint: str  # its name
    reason: str  # a CheckpointReason
    failed_in_a_row: int
    cause: str
    room: str  # the volume's free space when it failed
    newest: Optional[str]  # the newest checkpoint still there

    def text(self) -> str:
        in_a_row = f" ({self.failed_in_a_row} in a row)" if self.failed_in_a_row > 1 else ""
        return (f"{self.PREFIX}{self.checkpoint} ({self.reason}){in_a_row}: {self.cause}; {self.room}; "
                f"the newest checkpoint is still {self.newest or 'none'}; training goes on and the next checkpoint "
                f"tries again")  # fmt: skip


@dataclass(frozen=True)
class Resized:
    """A resume in a world of another size: each process keeps its batch, so the global batch follows."""

    world_size: int
    was_world_size: int
    global_batch: int
    was_global_batch: int

    def text(self) -> str:
        return (f", world of {self.world_size} (was {self.was_world_size}): global batch {self.global_batch} "
                f"(was {self.was_global_batch}), the schedule goes on in samples")  # fmt: skip


@dataclass(frozen=True)
class Resumed:
    PREFIX: ClassVar[str] = f"{CKPT} resumed from "
    _READ: ClassVar[re.Pattern] = re.compile(
        r"\[CKPT\] resumed from (\S+): (.+), global step (\d+) \((.+) checkpoint\)"
        r"(?:, world of (\d+) \(was (\d+)\): global batch (\d+) \(was (\d+)\), the schedule goes on in samples)?$")

    checkpoint: str  # its name
    where: str  # where the run stands: "epoch E step S/T sample A/B", or "all N epochs done"
    global_step: int  # the checkpoint's
    reason: str  # the CheckpointReason it was written for
    resized: Optional[Resized] = None

    def text(self) -> str:
        resized = self.resized.text() if self.resized else ""
        return f"{self.PREFIX}{self.checkpoint}: {self.where}, global step {self.global_step} ({self.reason} checkpoint){resized}"

    @classmethod
    def parse(cls, row: str) -> Optional[Resumed]:
        match = cls._READ.match(row)
        if not match:
            return None
        checkpoint, where, step, reason, *sizes = match.groups()
        resized = Resized(*map(int, sizes)) if sizes[0] else None
        return cls(checkpoint, where, int(step), reason, resized)


@dataclass(frozen=True)
class NoCheckpoint:
    PREFIX: ClassVar[str] = f"{CKPT} no checkpoint"

    directory: str

    def text(self) -> str:
        return f"{self.PREFIX} in {self.directory}: starting from scratch"


# --- [COMPILE]: a training process's first compiled step, by rank 0 -----------------------------------
@dataclass(frozen=True)
class Compiled:
    PREFIX: ClassVar[str] = "[COMPILE] "
    _READ: ClassVar[re.Pattern] = re.compile(r"\[COMPILE\] first step (\S+)s: (\d+) of (\d+) graphs loaded from the compile cache in (.+)$")

    seconds: float  # the first step on the host: compiling, or loading from the cache, and launching
    loaded: int  # the graphs (each with its backward) loaded from the cache
    graphs: int  # all the graphs the first step made ready
    cache: str  # the cache's directory

    def __post_init__(self) -> None:
        _round_fields(self, {"seconds": ".2f"})

    def text(self) -> str:
        return f"{self.PREFIX}first step {self.seconds:.2f}s: {self.loaded} of {self.graphs} graphs loaded from the compile cache in {self.cache}"

    @classmethod
    def parse(cls, row: str) -> Optional[Compiled]:
        match = cls._READ.match(row)
        if not match:
            return None
        seconds, loaded, graphs, cache = match.groups()
        return cls(float(seconds), int(loaded), int(graphs), cache)
