"""The process group's flight recorder (trainer/flight_recorder.py) on real Gloo ranks.

What the hang watch writes of it in a hung world is tested with the watch: test_trainer_multinode.py
(a frozen worker) and tests/cluster/test_cluster_hang_watch.py (a frozen pod).
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
from flight_recorder_probe import COMPLETED_BEFORE
from trainer_testing import PYTHON, clean_env, free_port

from trainer import flight_recorder

PROBE = Path(__file__).with_name("flight_recorder_probe.py")


@pytest.mark.timeout(120)
def test_the_flight_recorder_names_the_collective_a_rank_waits_in_and_clears_once_it_completed(spawn, tmp_path):
    """Two real Gloo ranks (flight_recorder_probe.py): rank 0's dump while its fourth all-reduce
    waits for rank 1 says so, in torch's pickle and in the summary; its dump after it completed
    names nothing outstanding."""
    port = free_port()
    ranks = [spawn([PYTHON, str(PROBE), str(rank), str(port), str(tmp_path)], clean_env(), f"rank-{rank}") for rank in (0, 1)]
    assert [rank.wait(90) for rank in ranks] == [0, 0], [rank.text() for rank in ranks]

    pending = (tmp_path / "pending").read_bytes()
    trace = pickle.loads(pending)  # torch's own format, as its analyzer reads it
    completed = trace["pg_status"]["0"]["last_completed_collective"]
    (waiting,) = [entry for entry in trace["entries"] if entry["collective_seq_id"] > completed]
    assert (waiting["profiling_name"], waiting["input_sizes"], waiting["retired"]) == ("gloo:all_reduce", [[4]], False), waiting
    assert completed == COMPLETED_BEFORE and waiting["collective_seq_id"] == COMPLETED_BEFORE + 1, trace["pg_status"]
    summary = flight_recorder.summary(pending, now_ns=waiting["time_created_ns"] + 2_500_000_000)
    assert summary == [
        f"process group 0: last enqueued collective #{completed + 1}, started #-1, completed #{completed}",
        f"  not completed: #{completed + 1} gloo:all_reduce of [[4]] Float, scheduled, enqueued 2.5 s before this dump",
    ], summary
    assert flight_recorder.summary((tmp_path / "completed").read_bytes()) == [
        f"process group 0: last enqueued collective #{completed + 1}, started #-1, completed #{completed + 1}"
    ]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="NCCL's recorder needs a GPU")
@pytest.mark.timeout(120)
def test_an_nccl_rank_dumps_its_own_recorder_with_its_all_reduces(spawn, tmp_path):
    """NCCL keeps a recorder of its own, read by another call (flight_recorder.dump): a world of one on
    the GPU dumps its three all-reduces, completed, in the format and summary a Gloo rank's have."""
    rank = spawn([PYTHON, str(PROBE), "nccl", str(free_port()), str(tmp_path)], clean_env(), "nccl")
    assert rank.wait(90) == 0, rank.text()
    record = (tmp_path / "nccl").read_bytes()
    trace = pickle.loads(record)
    collectives = [entry for entry in trace["entries"] if not entry["is_p2p"]]
    assert [(entry["profiling_name"], entry["input_sizes"]) for entry in collectives][-COMPLETED_BEFORE:] == [
        ("nccl:all_reduce", [[4]])
    ] * COMPLETED_BEFORE, collectives
    (group,) = [group for group, status in trace["pg_status"].items() if status["last_enqueued_collective"] > 0]
    (line,) = [line for line in flight_recorder.summary(record) if line.startswith(f"process group {group}:")]
    # whether NCCL counts a collective started depends on its timing events: only the other two are asserted
    assert line.startswith(f"process group {group}: last enqueued collective #{COMPLETED_BEFORE}, started #"), line
    assert line.endswith(f", completed #{COMPLETED_BEFORE}"), line
