"""Finds a hung world in minutes instead of at the process group's timeout, and tears it down.

A rank that stops making progress (a stuck GPU or NIC, a frozen process) stalls every other rank
in its next collective until `--pg-timeout` (30 minutes by default). Here every training process
watches its own progress from a thread: the loop marks each finished step, and when a rank has
made no progress for longer than its bound (contract.hang_bound: a multiple of the slowest recent
step, kept between a floor and a ceiling), it exits with EXIT_HUNG. torchrun then restarts the
world, which re-forms and resumes from the newest checkpoint. A rank whose process is frozen cannot exit by itself: its torchrun
stops it when the others re-form the world.

So that the log says which rank hung, each rank publishes a heartbeat (its last finished step,
a counter) to the world's store every few seconds. A stalled rank reads them all twice:
a rank whose counter did not move is frozen; otherwise the rank furthest behind is named. The
lowest-numbered rank that is not to blame prints the one `[HANG]` line.

Before it exits, each rank that ends the world leaves the evidence an engineer reads afterwards:
its Python stacks, every thread's (where the training thread waits: which collective, which
step), under a summary of its process group's flight recorder (the collectives it has not
completed), in `<run>/hangs/<time>/rank-<r>.txt`, and the flight recorder's dump in torch's format
in `flight-recorder/rank_<r>` beside it: one directory for the world (the first rank to end it
names it in the store), which the `[HANG]` line names. A frozen rank leaves none: it cannot run.
"""

from __future__ import annotations

import faulthandler
import json
import os
import statistics
import threading
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Callable, Iterator

import torch.distributed as dist

from trainer import console, flight_recorder
from trainer import contract as c
from trainer.lines import HANG, HANG_EVIDENCE

# The exit status of a rank that found the world hung: neither success nor a SIGTERM stop, so
# torchrun restarts the world (the same status timeout(1) gives a command it ended).
EXIT_HUNG = 124

RECENT_STEPS = 50
STORE_TIMEOUT = timedelta(seconds=5)
# Where each rank's flight recorder dump goes in a hang's directory, named rank_<r> as torch's analyzer reads them.
FLIGHT_RECORDS = "flight-recorder"
# A rank slower than the others' median by this factor (in its own forward passes) is a straggler.
STRAGGLER_FACTOR = 1.5


@dataclass(frozen=True)
class HangLimits:
    floor_s: float = float(c.HANG_FLOOR_SECONDS)
    ceiling_s: float = float(c.HANG_CEILING_SECONDS)  # 0: no hang detection

    @property
    def enabled(self) -> bool:
        return self.ceiling_s > 0

    def bound(self, slowest_step_s: float | None) -> float:
        """Seconds without progress that count as a hang, given the slowest recent step."""
        return c.hang_bound(self.floor_s, self.ceiling_s, slowest_step_s)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "HangLimits":
        env = os.environ if env is None else env
        floor = env.get(c.HANG_TIMEOUT_FLOOR.name) or c.HANG_FLOOR_SECONDS
        ceiling = env.get(c.HANG_TIMEOUT_CEILING.name) or c.HANG_CEILING_SECONDS
        return cls(float(floor), float(ceiling))


@dataclass(frozen=True)
class Heartbeat:
    rank: int
    step: int  # the last global step this rank finished
    beats: int  # counts up while the rank's process runs
    busy: str  # what a rank is doing that is no step but no hang either ("" when training)

    def to_json(self) -> str:
        return json.dumps(self.__dict__)

    @classmethod
    def from_json(cls, text: bytes) -> "Heartbeat":
        return cls(**json.loads(text))


@dataclass(frozen=True)
class Verdict:
    """Who the world waits on, from two readings of every rank's heartbeat."""

    to_blame: tuple[int, ...]
    why: str
    reporter: int  # the rank that prints the [HANG] line


def judge(first: dict[int, Heartbeat | None] | None, second: dict[int, Heartbeat | None] | None, pods: list[str]) -> Verdict | None:
    """Who the world waits on: the ranks whose process did not beat between the two readings (frozen),
    else the ranks furthest behind; None when a live rank is busy with work it declared (no hang).

    A rank missing from a reading (its heartbeat unreadable) counts as frozen; a reading that is
    None (the store did not answer) blames rank 0, whose process hosts the store.
    """
    if first is None or second is None:
        return Verdict((0,), f"rank 0 in pod {pods[0]}, whose process hosts the world's store, does not answer", 1)
    frozen = tuple(r for r in sorted(second) if second[r] is None or first.get(r) is None
                   or second[r].beats == first[r].beats)  # fmt: skip
    if frozen:
        why = f"{_ranks(frozen)} stopped running (no heartbeat): " + ", ".join(_last_heard(r, pods[r], first.get(r) or second.get(r)) for r in frozen)
        to_blame = frozen
    elif any(hb.busy for hb in second.values()):
        return None  # a rank writes a model or a checkpoint the others wait for
    else:
        lowest = min(hb.step for hb in second.values())
        behind = tuple(r for r, hb in sorted(second.items()) if hb.step == lowest)
        if len(behind) < len(second):
            why = f"{_ranks(behind)} fell behind: " + ", ".join(f"rank {r} in pod {pods[r]} last finished global step {second[r].step}" for r in behind)
            to_blame = behind
        else:
            why = f"every rank waits at global step {lowest}, none behind the others (a collective that never completes)"
            to_blame = ()
    healthy = [r for r in sorted(second) if r not in to_blame]
    return Verdict(to_blame, why, healthy[0] if healthy else min(second))


def _ranks(ranks: tuple[int, ...]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)


def _last_heard(rank: int, pod: str, hb: Heartbeat | None) -> str:
    if hb is None:
        return f"rank {rank} in pod {pod} (its heartbeat never reached the store)"
    return f"rank {rank} in pod {pod} (at global step {hb.step} or later: its last heartbeat's)"


class HangWatch:
    """One rank's watch over the world's progress: `beat` after each step, `busy` around long work.

    Used as a context manager around the training; off in a world of one and when disabled.
    """

    def __init__(self, rank: int, pods: list[str], limits: HangLimits, connect: Callable[[], dist.Store] | None = None,
                 exit_process: Callable[[int], None] = os._exit, publish_every_s: float = 2.0,
                 evidence_dir: Path | None = None):  # fmt: skip
        """pods: every rank's pod, by rank. evidence_dir: where a hang's evidence goes (`<run>/hangs`)."""
        self.rank = rank
        self.evidence_dir = evidence_dir
        self.pods = pods
        self.world_size = len(pods)
        self.limits = limits
        self.enabled = limits.enabled and self.world_size > 1
        self._connect = connect or _world_store
        self._exit = exit_process
        self._publish_every_s = publish_every_s
        self._lock = threading.Lock()
        self._step = 0
        self._last_progress: float | None = None  # None until the first step: startup is not watched
        self._step_times: deque[float] = deque(maxlen=RECENT_STEPS)
        self._busy: list[str] = []
        self._beats = 0
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []
        self._store: dist.Store | None = None

    # --- the training loop's side -----------------------------------------------------------
    def beat(self, step: int | None = None) -> None:
        """Progress: a finished optimizer step (`step`), or any other unit of work (a validation batch)."""
        now = time.monotonic()
        with self._lock:
            if step is not None and step != self._step:
                if self._last_progress is not None:
                    self._step_times.append(now - self._last_progress)
                self._step = step
            self._last_progress = now

    @contextmanager
    def busy(self, what: str) -> Iterator[None]:
        """Work of this rank alone that may outlast a step (writing a model): not a hang while it lasts."""
        with self._lock:
            self._busy.append(what)
        try:
            yield
        finally:
            with self._lock:
                self._busy.pop()
                if self._last_progress is not None:
                    self._last_progress = time.monotonic()

    def slowest_step(self) -> float | None:
        """Seconds of the slowest recent step; None before two steps were timed."""
        with self._lock:
            return max(self._step_times) if self._step_times else None

    def bound(self) -> float:
        return self.limits.bound(self.slowest_step())

    def stalled_for(self) -> float:
        """Seconds since this rank last made progress; 0 before its first step and while busy."""
        with self._lock:
            if self._last_progress is None or self._busy:
                return 0.0
            return time.monotonic() - self._last_progress

    def _last_progress_at(self) -> float | None:
        with self._lock:
            return self._last_progress

    @classmethod
    def off(cls) -> "HangWatch":
        return cls(0, [own_pod()], HangLimits(ceiling_s=0))

    # --- the threads: one publishes this rank's heartbeat, one watches for a hang -------------
    def __enter__(self) -> "HangWatch":
        if not self.enabled:
            return self
        try:  # a client each: a store client is one connection, used by one thread at a time
            publishing, reading = self._connect(), self._connect()
        except Exception as error:  # a watch that cannot start must not stop the training
            console.line(f"{HANG} rank {self.rank}: no hang detection, the world's store is unreachable: {error}")
            return self
        self._store = reading
        self._threads = [
            threading.Thread(target=self._publish_loop, args=(publishing,), name="hang-watch-heartbeat", daemon=True),
            threading.Thread(target=self._watch_loop, name="hang-watch", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stopped.set()
        for thread in self._threads:
            thread.join(timeout=3 * STORE_TIMEOUT.total_seconds())

    def _publish_loop(self, store: dist.Store) -> None:
        while True:
            with self._lock:
                self._beats += 1
                beat = Heartbeat(self.rank, self._step, self._beats, self._busy[-1] if self._busy else "")
            try:
                store.set(_key(f"rank-{self.rank}"), beat.to_json())
            except Exception:
                pass  # the store's host is frozen: the stall will show it
            if self._stopped.wait(self._publish_every_s):
                return

    def _watch_loop(self) -> None:
        while not self._stopped.wait(self._publish_every_s):
            bound = self.bound()
            if self.stalled_for() <= bound:
                continue
            progress, first = self._last_progress_at(), self._read_all()
            self._stopped.wait(2 * self._publish_every_s + 1)  # every live rank publishes twice meanwhile
            second = self._read_all()
            stalled = self.stalled_for()
            # progress between the readings: the world moved on (a slow step, not a hang), and the
            # first reading, taken while the ranks still ran, cannot tell who stopped afterwards
            if self._stopped.is_set() or self._last_progress_at() != progress or stalled <= bound:
                continue
            verdict = judge(first, second, self.pods)
            if verdict is not None:
                self._tear_down(stalled, bound, verdict)
                return

    def _read_all(self) -> dict[int, Heartbeat | None] | None:
        """Every rank's heartbeat (None: it never published); None when the store does not answer."""
        beats: dict[int, Heartbeat | None] = {}
        try:
            for rank in range(self.world_size):
                key = _key(f"rank-{rank}")
                beats[rank] = Heartbeat.from_json(self._store.get(key)) if self._store.check([key]) else None
        except Exception:
            return None
        return beats

    def _tear_down(self, stalled: float, bound: float, verdict: Verdict) -> None:
        evidence = self._leave_evidence(stalled, verdict)
        if verdict.reporter == self.rank:
            console.line(
                f"{HANG} no training progress for {stalled:.0f} s (bound {bound:.0f} s) after global step {self._step}: {verdict.why}; "
                f"rank {self.rank} ends the world (exit {EXIT_HUNG}) so it re-forms from its newest checkpoint"
                + (f"{HANG_EVIDENCE}{evidence}/" if evidence else "")
            )
        self._exit(EXIT_HUNG)

    def _leave_evidence(self, stalled: float, verdict: Verdict) -> Path | None:
        """This rank's Python stacks, every thread's, in `<evidence_dir>/<time>/rank-<r>.txt`: the
        world's one directory, named by the first rank to end the world (the store's compare-and-set),
        or by this rank's own clock where the store does not answer. None where it could not be written."""
        if self.evidence_dir is None:
            return None
        name = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        try:
            name = self._store.compare_set(_key("evidence"), "", name).decode()
        except Exception:
            pass  # its host is frozen: this rank's own time
        directory = self.evidence_dir / name
        record, summary = flight_recorder.read()
        try:
            directory.mkdir(parents=True, exist_ok=True)
            if record is not None:
                (directory / FLIGHT_RECORDS).mkdir(exist_ok=True)
                (directory / FLIGHT_RECORDS / f"rank_{self.rank}").write_bytes(record)
            with open(directory / f"rank-{self.rank}.txt", "w") as out:
                out.write(f"rank {self.rank} in pod {self.pods[self.rank]}: no progress for {stalled:.0f} s after "
                          f"global step {self._step}; {verdict.why}\n\n")  # fmt: skip
                if record is not None:
                    out.write(f"flight recorder (torch's, in {FLIGHT_RECORDS}/rank_{self.rank}):\n")
                    out.writelines(f"{line}\n" for line in summary)
                    out.write("\n")
                out.flush()
                faulthandler.dump_traceback(out, all_threads=True)
        except OSError as error:
            console.line(f"{HANG} rank {self.rank}: its evidence not written to {directory}: {error}")
            return None
        return directory


def stragglers(forward_s: list[float]) -> list[tuple[int, float]]:
    """(rank, how much slower) for each rank whose forward passes took STRAGGLER_FACTOR x the others' median.

    Forward passes are each rank's own work (DDP's all-reduce runs in the backward pass), so a
    slow GPU or a throttled host shows there, while waiting for a slow peer does not.
    """
    slow = []
    for rank, seconds in enumerate(forward_s):
        others = forward_s[:rank] + forward_s[rank + 1 :]
        typical = statistics.median(others) if others else 0.0
        if typical > 0 and seconds >= STRAGGLER_FACTOR * typical:
            slow.append((rank, seconds / typical - 1))
    return slow


def own_pod() -> str:
    return os.environ.get(c.POD_NAME.name) or os.uname().nodename


def _key(name: str) -> str:
    """A key of this world's (torchrun's restart count) hang watch in the store."""
    return f"hang-watch/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/{name}"


def _world_store() -> dist.Store:
    """A client of the store torchrun gave this world: torchrun points its workers' MASTER_ADDR and
    MASTER_PORT at the store rank 0 hosts (not at the pod env's rendezvous)."""
    return dist.TCPStore(
        os.environ[c.MASTER_ADDR.name], int(os.environ[c.MASTER_PORT.name]), is_master=False, timeout=STORE_TIMEOUT,
        wait_for_workers=False,
    )  # fmt: skip
