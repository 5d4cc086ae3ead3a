"""A world followed until it ends: rank 0's lines as progress, a line for each restart, re-form and
wait, and the result.

Rank 0's log is read with `kubectl logs -f` of pod 0's current container; a new pod 0 (a Job
replaces a failed one, a resize makes a new world) or a restarted container is followed in turn.
The workload's own end decides (a Job's Complete or Failed); a StatefulSet, whose pods run again
after the run ends, ends at rank 0's `[DONE]`.
"""

from __future__ import annotations

import queue
import re
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Optional, TextIO

from trainer import contract, lines
from trainer.lines import DoneLine, EpochLine, NoCheckpoint, Resumed, TrainLine

from .kubectl import Kubectl
from .progress import Progress
from .world_state import PodState, WorldRef, WorldState, read_world

POLL_S = 2.0
DRAIN_S = 30.0  # how long the last lines of an ended world may take to arrive
ERROR_LINES = 40  # untagged lines kept to explain a failure: torchrun's summary and how its agent ended
# torchrun's log of a failed worker: one record, each line under the same header (severity, time, pid,
# file:line), the first `failed (exitcode: 1) local_rank: 0 (pid: 13753) of fn: ...`, then its traceback
TORCHRUN_RECORD = re.compile(r"^(?P<header>[DIWEF]\d{4} [\d:.]+ +\d+ \S+:\d+\]) ?(?P<text>.*)$")
WORKER_FAILED = re.compile(r"^failed \(exitcode: -?\d+\) local_rank: \d+")


class FollowTimeout(TimeoutError):
    pass


@dataclass
class RunEnd:
    ok: bool
    reason: str  # "Complete", or why it failed
    result: Optional[DoneLine] = None  # rank 0's [DONE] line
    last_lines: list[str] = field(default_factory=list)  # rank 0's last lines before a failure
    worker_error: list[str] = field(default_factory=list)  # the last failed worker's exit and traceback


class LogTail:
    """`kubectl logs -f` of one container, its lines handed over through a queue (None: the end)."""

    def __init__(self, kubectl: Kubectl, pod: PodState, container: str, skip: int):
        self.key = (pod.uid, pod.restarts)
        self.lines: queue.Queue[Optional[str]] = queue.Queue()
        self.read = 0
        self.ended = False
        self.process = subprocess.Popen(kubectl.argv("logs", "-f", pod.name, "-c", container), stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True)  # fmt: skip
        self.skip = skip
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for number, row in enumerate(self.process.stdout, start=1):
            if number > self.skip:  # a re-attached stream starts from the container's first line again
                self.lines.put(row.rstrip("\n"))
        self.lines.put(None)

    def take(self, wait_s: float) -> list[str]:
        """The lines that arrived, waiting up to wait_s for the first."""
        taken: list[str] = []
        try:
            item = self.lines.get(timeout=wait_s)
            while True:
                if item is None:
                    self.ended = True
                    break
                taken.append(item)
                item = self.lines.get_nowait()
        except queue.Empty:
            pass
        self.read += len(taken)
        return taken

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


class Follower:
    def __init__(self, kubectl: Kubectl, world: WorldRef, out: TextIO, terminal: bool = False):
        self.kubectl, self.world = kubectl, world
        self.progress = Progress(out, terminal)
        self.tail: Optional[LogTail] = None
        self.read_of: dict[tuple[str, int], int] = {}  # lines read of each container, for a re-attach
        self.pods_seen: dict[int, PodState] = {}
        self.waits_said: set[str] = set()
        self.lost_nodes_said: set[str] = set()
        self.done: Optional[DoneLine] = None
        self.recent: deque[str] = deque(maxlen=ERROR_LINES)
        self.worker_error: list[str] = []
        self.worker_error_header: Optional[str] = None  # the header of the record being read

    def follow(self, timeout_s: float) -> RunEnd:
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                state = read_world(self.kubectl, self.world)
                self._say_changes(state)
                self._attach(state)
                if state.ended or (self.done and self.world.kind == contract.STATEFULSET):
                    self._drain()
                    return self._end(state)
                if time.monotonic() > deadline:
                    raise FollowTimeout(f"the world did not end within {timeout_s:.0f} s; waiting on: "
                                        f"{'; '.join(state.waits()) or 'training'}")  # fmt: skip
                self._read(POLL_S)
        finally:
            if self.tail:
                self.tail.close()

    # --- the cluster's side ----------------------------------------------------------------
    def _say_changes(self, state: WorldState) -> None:
        waits = set(state.waits())
        for wait in sorted(waits - self.waits_said):
            self.progress.say(f"[wait] {wait}")
        self.waits_said = waits
        for lost in sorted(set(state.lost_nodes) - self.lost_nodes_said):
            self.progress.say(f"[node] {lost}")
        self.lost_nodes_said = set(state.lost_nodes)
        for index, pod in state.live_pods.items():
            before = self.pods_seen.get(index)
            if before and before.uid != pod.uid:
                self.progress.say(f"[restart] pod {index}: {before.name} replaced by {pod.name}")
            elif before and pod.restarts > before.restarts:
                self.progress.say(f"[restart] pod {index} ({pod.name}): its container restarted after {pod.last_exit or 'a stop'}")
            self.pods_seen[index] = pod

    def _attach(self, state: WorldState) -> None:
        pod = state.rank0_pod()
        if pod is None or pod.phase == "Pending":
            return
        key = (pod.uid, pod.restarts)
        if self.tail and self.tail.key == key and not (self.tail.ended and pod.phase == "Running"):
            return
        if self.tail:
            self._read(0)
            self.read_of[self.tail.key] = self.read_of.get(self.tail.key, 0) + self.tail.read
            self.tail.close()
        self.tail = LogTail(self.kubectl, pod, self.world.container, skip=self.read_of.get(key, 0))

    # --- rank 0's side ----------------------------------------------------------------------
    def _read(self, wait_s: float) -> None:
        if not self.tail or self.tail.ended:
            time.sleep(wait_s)
            return
        ends = time.monotonic() + wait_s
        while True:
            for row in self.tail.take(max(ends - time.monotonic(), 0)):
                self._line(row)
            if self.tail.ended or time.monotonic() >= ends:
                return

    def _drain(self) -> None:
        """The ended world's last lines ([DONE] among them)."""
        ends = time.monotonic() + DRAIN_S
        while self.tail and not self.tail.ended and time.monotonic() < ends:
            self._read(1.0)

    def _line(self, row: str) -> None:
        say = self.progress.say
        if figures := TrainLine.parse(row):
            self.progress.train(figures)
        elif epoch := EpochLine.parse(row):
            say(f"[epoch] {epoch.summary()}")
        elif row.startswith(Resumed.PREFIX):
            self.progress.world_changed()
            say(f"[re-form] {row[len(lines.CKPT) + 1:]}")
        elif row.startswith(NoCheckpoint.PREFIX):
            say("[start] no checkpoint yet: the world trains from the start")
        elif row.startswith((lines.REJOINING, lines.STOPPED)):
            say(f"[re-form] {row.split(' ', 1)[1]}")
        elif row.startswith(lines.HANG):
            say(f"[hang] {row[len(lines.HANG):].strip()}")
        elif row.startswith(lines.TORCHRUN_STARTED):
            say("[wait] rendezvous: torchrun waits for every pod of the world to join")
        elif row.startswith(lines.PREFLIGHT_WAITING):
            say(f"[wait] {row.split(' ', 1)[1]}")
        elif (done := DoneLine.parse(row)) and done.rank == 0:
            self.done = done
        elif not row.startswith("["):
            self.recent.append(row)
            self._worker_error(row)

    def _worker_error(self, row: str) -> None:
        """Keep the last failed worker's record apart: torchrun's own traceback after it, as its agent
        ends, may be longer than ERROR_LINES, and the worker's error is the failure's cause."""
        record = TORCHRUN_RECORD.match(row)
        if record and WORKER_FAILED.match(record["text"]):
            self.worker_error, self.worker_error_header = [record["text"]], record["header"]
        elif record and record["header"] == self.worker_error_header:
            if record["text"].strip():
                self.worker_error.append(record["text"])
        else:
            self.worker_error_header = None

    def _end(self, state: WorldState) -> RunEnd:
        if self.done and (state.ended in (None, "Complete")):
            return RunEnd(True, "Complete", self.done)
        reason = state.ended or "the world ended without rank 0's [DONE] line"
        return RunEnd(False, reason, self.done, list(self.recent), list(self.worker_error))
