"""How long a world of two pods takes to train again after losing one (a measurement, not a test).

Two pods as two real entrypoints on 127.0.0.1 (tests/trainer's harness), training the loss tests'
run. Once step 16 is checkpointed, one pod loses every process at once (SIGKILL: a node lost, a
pod removed with no grace) and its replacement starts the moment it is gone, as a StatefulSet's
would (the cluster's own part, creating and starting the pod, is not in these figures). Timed from
the loss, on the log lines as they appear (polled every 50 ms):
  the replacement's torchrun, both ranks in the new process group, the checkpoint loaded, the
  first `[TRAIN]` line of the new world (--log-every 8: up to 8 steps after the resume).
Side by side, interleaved, for pod 1 lost and for pod 0 lost:
  torchrun's defaults: a rendezvous heartbeat of 5 s, 3 of them missed (a lost pod dropped after
    15 s), and each worker a new interpreter that imports torch and the trainer (`--start-method=spawn`);
  the product's heartbeat (RDZV_KEEP_ALIVE_INTERVAL, 1 s, 5 missed), workers still spawned;
  the product: that heartbeat, and workers forked from a server that imported them once
    (trainer/pod/agent.py).
Usage: .venv/bin/python bench/bench_reform.py [--repeats 2] [--lost 1] [--lost 0]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "trainer")]
from report import print_table  # noqa: E402  bench/report.py: the scripts run with bench/ on sys.path
from trainer_testing import (  # noqa: E402
    LONG_ARGS, Proc, clean_env, entrypoint_command, free_port, kill_tree, pod_env, store_at, store_command,
)  # fmt: skip

from trainer import contract as c  # noqa: E402

SPAWNED = ["--start-method=spawn"]


class Setup(NamedTuple):
    keep_alive: int  # seconds between rendezvous heartbeats
    missed: int  # heartbeats missed before a pod counts as gone
    options: list[str]  # torchrun options before the training run
    store_apart: bool  # the store in a process of its own


MISSED = c.KEEP_ALIVE_MAX_ATTEMPTS
SETUPS = {
    "torchrun's defaults (heartbeat 5 s, 3 missed, workers spawned)": Setup(5, 3, SPAWNED, False),
    f"heartbeat 1 s, {MISSED} missed, workers spawned": Setup(1, MISSED, SPAWNED, False),
    f"heartbeat 1 s, {MISSED} missed, workers forked, the store on pod 0": Setup(1, MISSED, [], False),
    f"the product (heartbeat 1 s, {MISSED} missed, workers forked, the store apart)": Setup(1, MISSED, [], True),
}
MARKS = (("torchrun", "[DDP] torchrun"), ("process group", "[DDP] process"), ("resumed", "[CKPT] resumed"), ("[TRAIN]", "[TRAIN]"))
RESTARTS = {c.MAX_RESTARTS.name: "2", c.PET_MAX_RESTARTS.name: "2"}


def start(name: str, port: int, out: Path, setup: str, store_port: int | None) -> Proc:
    chosen = SETUPS[setup]
    store = {} if store_port is None else store_at(store_port)
    heartbeat = {c.RDZV_KEEP_ALIVE_INTERVAL.name: str(chosen.keep_alive), c.RDZV_KEEP_ALIVE_MAX_ATTEMPTS.name: str(chosen.missed)}
    env = clean_env(**pod_env(name, port, **RESTARTS, **heartbeat, **store), OUT_DIR=str(out))
    return launch(entrypoint_command([*chosen.options, *LONG_ARGS]), env, out / f"{name}-{time.monotonic_ns()}.log")


def launch(command: list[str], env: dict[str, str], log: Path) -> Proc:
    with open(log, "wb") as sink:
        popen = subprocess.Popen(command, env=env, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    return Proc(popen, log)


def one_loss(lost_index: int, setup: str) -> dict[str, float]:
    """Seconds from the loss to each mark of the re-formed world, read from the new lines of both logs."""
    out = Path(tempfile.mkdtemp(prefix="bench-reform-"))
    port = free_port()
    store_port = free_port() if SETUPS[setup].store_apart else None
    stores = [] if store_port is None else [launch(store_command(str(store_port)), clean_env(), out / "store.log")]
    pods = [start("ddp-0", port, out, setup, store_port), start("ddp-1", port, out, setup, store_port)]
    try:
        checkpoint = out / "run" / "checkpoints" / "ckpt-00000016.json"
        deadline = time.monotonic() + 240
        while not checkpoint.exists():
            if time.monotonic() > deadline or any(p.ended() for p in stores + pods):
                raise RuntimeError(f"no checkpoint of step 16: {[p.ended() for p in stores + pods]}")
            time.sleep(0.02)
        survivor, lost = pods[1 - lost_index], pods[lost_index]
        already = len(survivor.text())
        lost_at = time.monotonic()
        kill_tree(lost.pid)
        lost.popen.wait(10)
        replacement = start(f"ddp-{lost_index}", port, out, setup, store_port)
        pods.append(replacement)
        seen: dict[str, float] = {}
        while "[TRAIN]" not in seen:
            if time.monotonic() - lost_at > 180:
                raise RuntimeError(f"no [TRAIN] line 180 s after the loss; reached {seen}")
            since = survivor.text()[already:] + replacement.text()
            for name, tag in MARKS:
                if name not in seen and tag in since:
                    seen[name] = time.monotonic() - lost_at
            time.sleep(0.05)
        return seen
    finally:
        for process in stores + pods:
            kill_tree(process.pid)
            process.popen.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--lost", type=int, choices=(0, 1), action="append", help="the pod lost (default: 1, then 0)")
    args = parser.parse_args()
    losses = args.lost or [1, 0]
    cases = [(lost, setup) for lost in losses for setup in SETUPS]
    runs: dict[tuple[int, str], list[dict[str, float]]] = {case: [] for case in cases}
    for _ in range(args.repeats):
        for case in cases:
            runs[case].append(one_loss(*case))

    def median(case: tuple[int, str], mark: str) -> float:
        return statistics.median(run[mark] for run in runs[case])

    rows = []
    for lost, setup in cases:
        marks = ", ".join(f"{name} {median((lost, setup), name):.1f}" for name, _ in MARKS)
        rows.append((f"pod {lost} lost, {setup}: {marks}", f"{median((lost, setup), '[TRAIN]'):.1f} s"))
    baseline, *others = SETUPS
    for lost in losses:
        for setup in others:
            ratio = median((lost, setup), "[TRAIN]") / median((lost, baseline), "[TRAIN]")
            rows.append((f"pod {lost} lost: to the first [TRAIN], {setup} vs torchrun's defaults", f"{ratio:.2f}"))
    print_table(f"Re-forming a world of two pods after losing one (median of {args.repeats}, seconds after the loss)", rows)


if __name__ == "__main__":
    main()
