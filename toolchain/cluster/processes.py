"""The cluster's daemons as processes: started with a log each, recorded with their start time (so a
later process that reuses an id is never taken for one of them), waited on, and ended."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable


class ClusterError(RuntimeError):
    pass


def start_time(pid: int) -> str | None:
    """The kernel's start time of a process (field 22 of /proc/PID/stat), or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":  # exited; only its parent's wait is missing
        _reap(pid)
        return None
    return fields[19]


def _reap(pid: int) -> None:
    """Collects a zombie that is this process's own child (a daemon this process started)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def alive(pid: int, started: str) -> bool:
    """The recorded process is still running (not a later process that reuses its id)."""
    return start_time(pid) == started


def wait_gone(pids: Iterable[tuple[int, str]], timeout: float) -> list[tuple[int, str]]:
    """Waits until none of `pids` runs; returns those still running at the timeout."""
    pids = list(pids)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = [(pid, st) for pid, st in pids if alive(pid, st)]
        if not pids:
            return []
        time.sleep(0.1)
    return [(pid, st) for pid, st in pids if alive(pid, st)]


def kill_all(find: Callable[[], list[tuple[int, str]]], tries: int = 3) -> list[tuple[int, str]]:
    """SIGKILLs whatever `find` returns until it finds nothing (a process may start another as it
    dies); returns what is still there after `tries` rounds."""
    left = find()
    for _ in range(tries):
        if not left:
            break
        for pid, _started in left:
            send(pid, signal.SIGKILL)
        wait_gone(left, 10)
        left = find()
    return left


def send(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


class Daemons:
    """The processes of one cluster run, recorded in `<run>/pids.json` with their logs in `<run>/logs`."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.pids: dict[str, tuple[int, str]] = {}

    @property
    def logs(self) -> Path:
        return self.run_dir / "logs"

    def recorded(self) -> dict[str, tuple[int, str]]:
        """{process: (pid, start time)} of the run in run_dir, crashed or not; empty if none."""
        pids_file = self.run_dir / "pids.json"
        if not pids_file.exists():
            return {}
        return {key: tuple(value) for key, value in json.loads(pids_file.read_text()).items()}

    def popen(self, key: str, argv: list[str], **kwargs: Any) -> subprocess.Popen:
        with open(self.logs / f"{key}.log", "ab") as log:
            # A session of its own: `cluster up` returns and the daemons stay, Ctrl-C in a test
            # run reaches pytest alone, whose teardown stops them in order.
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, **kwargs)  # fmt: skip
        started = start_time(proc.pid)
        if started is None:
            raise ClusterError(f"{key} exited at once:\n{self.tail(key)}")
        self.pids[key] = (proc.pid, started)
        (self.run_dir / "pids.json").write_text(json.dumps(self.pids))
        return proc

    def end(self, keys: Iterable[str], sig: int = signal.SIGTERM, grace: float = 10) -> None:
        """Ends these daemons (SIGKILL after `grace`) and drops them from the record."""
        procs = [self.pids.pop(key) for key in keys if key in self.pids]
        (self.run_dir / "pids.json").write_text(json.dumps(self.pids))
        for pid, started in procs:
            if alive(pid, started):
                send(pid, sig)
        for pid, _ in wait_gone(procs, grace):
            send(pid, signal.SIGKILL)
        wait_gone(procs, 10)

    def tail(self, key: str, lines: int = 40) -> str:
        path = self.logs / f"{key}.log"
        if not path.exists():
            return "(no log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def wait(self, ready: Callable[[], Any], deadline: float, what: str) -> None:
        """Polls `ready` until it holds; fails at once, with the log, when a daemon has exited."""
        last: Any = None
        while time.monotonic() < deadline:
            for key, (pid, started) in self.pids.items():
                if not alive(pid, started):
                    raise ClusterError(f"{key} exited; the end of its log:\n{self.tail(key)}")
            try:
                if ready():
                    return
            except Exception as error:  # noqa: BLE001 - kept as the reason if it never gets ready
                last = error
            time.sleep(0.25)
        raise ClusterError(f"timed out waiting for {what} (last: {last})")

    def keep_logs(self, keep: Path) -> None:
        """A failed start's logs, copied out of the run before stop removes it."""
        if self.logs.exists():
            shutil.rmtree(keep, ignore_errors=True)
            shutil.copytree(self.logs, keep)
            print(f"[cluster] start failed; logs kept in {keep}", file=sys.stderr)
