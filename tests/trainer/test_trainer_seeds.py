"""Seeds in a world of two: the same initial weights on every rank, dropout masks of each rank's own,
and a resume that goes on with each rank's masks exactly where an uninterrupted run has them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from trainer_testing import PYTHON, clean_env, done_lines, free_port, same_result

from trainer.stop import EXIT_STOPPED

PROBE = str(Path(__file__).with_name("dropout_probe.py"))
ARGS = ["probe", "--epochs", "2", "--samples", "256", "--batch", "16", "--seed", "5", "--checkpoint-every", "0",
        "--log-every", "4", "--device", "cpu", "--pg-timeout", "60", "--run-name", "probe"]  # fmt: skip
SIGTERM_AT = 3  # mid-epoch 1 (8 steps an epoch: 256 samples, 2 ranks x 16)
STOPPED_AT = 4  # the ranks agree on a stop where they sync their figures: every --log-every steps


def run_world_of_two(spawn, directory: Path, name: str, **extra: str) -> list:
    """Both ranks of the probe started as plain processes (env:// rendezvous on loopback)."""
    directory.mkdir(exist_ok=True)
    port = str(free_port())
    procs = []
    for rank in (0, 1):
        env = clean_env(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                        MASTER_PORT=port, PROBE_DIR=str(directory), **extra)  # fmt: skip
        procs.append(spawn([PYTHON, PROBE, *ARGS, "--out-dir", str(directory)], env, f"{name}-rank-{rank}"))
    return procs


def masks(directory: Path, rank: int) -> list[list[int]]:
    return [json.loads(line) for line in (directory / f"masks-rank-{rank}.jsonl").read_text().splitlines()]


@pytest.mark.timeout(240)
def test_ranks_start_identical_then_draw_their_own_dropout_and_resume_exactly(spawn, tmp_path):
    whole = tmp_path / "whole"
    procs = run_world_of_two(spawn, whole, "whole")
    assert [proc.wait(120) for proc in procs] == [0, 0], procs[0].text()[-4000:] + procs[1].text()[-4000:]
    expected = [same_result(line) for proc in procs for line in done_lines(proc.text())]
    assert len(expected) == 2 and expected[0] == expected[1], "the replicas end identical"

    initial = [torch.load(whole / f"initial-rank-{rank}.pt", weights_only=True) for rank in (0, 1)]
    assert all(torch.equal(initial[0][name], initial[1][name]) for name in initial[0]), "one initialization on every rank"

    drawn = [masks(whole, rank) for rank in (0, 1)]
    assert len(drawn[0]) == len(drawn[1]) == 16
    assert all(mine != theirs for mine, theirs in zip(*drawn)), "each rank drops units of its own at every step"

    # SIGTERM in step 3, a stop at step 4, then started again: each rank's masks go on as if never stopped.
    broken = tmp_path / "broken"
    procs = run_world_of_two(spawn, broken, "stopped", PROBE_SIGTERM_AT=str(SIGTERM_AT))
    assert [proc.wait(120) for proc in procs] == [EXIT_STOPPED, EXIT_STOPPED], procs[0].text()[-4000:]
    procs = run_world_of_two(spawn, broken, "resumed")
    assert [proc.wait(120) for proc in procs] == [0, 0], procs[0].text()[-4000:] + procs[1].text()[-4000:]
    assert f"[CKPT] resumed from ckpt-{STOPPED_AT:08d}:" in procs[0].text()
    assert [masks(broken, rank) for rank in (0, 1)] == drawn
    assert [same_result(line) for proc in procs for line in done_lines(proc.text())] == expected
