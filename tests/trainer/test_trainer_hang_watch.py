"""The hang watch (trainer/hang_watch.py): its bound, its verdicts, and its threads on a real TCPStore.

The training processes' side (a frozen pod found and its world re-formed) is in
test_trainer_multinode.py; the local cluster's in tests/cluster/test_cluster_world_lifecycle.py.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
import torch.distributed as dist
from trainer_testing import free_port
from waiting import wait_for

from trainer import contract as c
from trainer.lines import HANG_EVIDENCE
from trainer.hang_watch import EXIT_HUNG, HangLimits, HangWatch, Heartbeat, judge, stragglers


def test_the_bound_is_ten_slowest_steps_kept_between_floor_and_ceiling():
    limits = HangLimits(floor_s=30, ceiling_s=120)
    assert limits.bound(None) == 30  # before any step: the floor
    assert limits.bound(0.05) == 30
    assert limits.bound(5) == 50
    assert limits.bound(60) == 120
    assert HangLimits(floor_s=30, ceiling_s=0).enabled is False


def test_the_limits_come_from_the_pod_env_with_defaults():
    assert HangLimits.from_env({}) == HangLimits(30, 120)
    env = {c.HANG_TIMEOUT_FLOOR.name: "10", c.HANG_TIMEOUT_CEILING.name: "0"}
    assert HangLimits.from_env(env) == HangLimits(10, 0)


PODS = ["ddp-0", "ddp-1", "ddp-2"]


def beat(rank: int, step: int, beats: int, busy: str = "") -> Heartbeat:
    return Heartbeat(rank, step, beats, busy)


def test_a_rank_that_did_not_beat_between_the_readings_is_frozen_and_named():
    first = {0: beat(0, 16, 5), 1: beat(1, 16, 9), 2: beat(2, 16, 5)}
    second = {0: beat(0, 16, 8), 1: beat(1, 16, 9), 2: beat(2, 16, 8)}
    verdict = judge(first, second, PODS)
    assert verdict.to_blame == (1,)
    assert verdict.reporter == 0
    assert "rank 1 stopped running" in verdict.why and "rank 1 in pod ddp-1 (at global step 16 or later" in verdict.why


def test_a_heartbeat_that_never_arrived_counts_as_frozen_and_rank_0_frozen_leaves_rank_1_to_report():
    first = {0: None, 1: beat(1, 3, 1)}
    second = {0: None, 1: beat(1, 3, 3)}
    verdict = judge(first, second, PODS)
    assert verdict.to_blame == (0,) and verdict.reporter == 1
    assert "never reached the store" in verdict.why


def test_a_store_that_does_not_answer_blames_rank_0_its_host():
    verdict = judge({0: beat(0, 5, 1), 1: beat(1, 5, 1)}, None, PODS)
    assert verdict.to_blame == (0,) and verdict.reporter == 1
    assert "rank 0 in pod ddp-0, whose process hosts the world's store, does not answer" in verdict.why


def test_live_ranks_behind_the_others_are_named_and_equal_ones_blame_nobody():
    behind = judge({0: beat(0, 20, 1), 1: beat(1, 19, 1)}, {0: beat(0, 20, 3), 1: beat(1, 19, 3)}, PODS)
    assert behind.to_blame == (1,) and "rank 1 fell behind: rank 1 in pod ddp-1 last finished global step 19" in behind.why
    level = judge({0: beat(0, 20, 1), 1: beat(1, 20, 1)}, {0: beat(0, 20, 3), 1: beat(1, 20, 3)}, PODS)
    assert level.to_blame == () and level.reporter == 0 and "every rank waits at global step 20" in level.why


def test_a_live_rank_busy_with_declared_work_is_no_hang():
    first = {0: beat(0, 20, 1), 1: beat(1, 20, 1, busy="writing epoch 1's model")}
    second = {0: beat(0, 20, 3), 1: beat(1, 20, 3, busy="writing epoch 1's model")}
    assert judge(first, second, PODS) is None


def test_stragglers_are_ranks_much_slower_than_the_others_median():
    assert stragglers([1.0, 1.1, 0.9, 2.0]) == [(3, pytest.approx(1.0))]
    assert stragglers([1.0, 1.4]) == []
    assert [rank for rank, _ in stragglers([3.0, 1.0])] == [0]
    assert stragglers([0.5]) == []


@pytest.fixture
def store_port():
    """A TCPStore server, as a world's rank 0 hosts it; the watches connect to it as clients."""
    port = free_port()
    server = dist.TCPStore("127.0.0.1", port, is_master=True, timeout=timedelta(seconds=10), wait_for_workers=False)
    yield port
    del server


def published_step(port: int, rank: int) -> int | None:
    reader = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=2), wait_for_workers=False)
    key = f"hang-watch/0/rank-{rank}"
    return Heartbeat.from_json(reader.get(key)).step if reader.check([key]) else None


def watch_of(rank: int, port: int, exits: list, limits=HangLimits(floor_s=1, ceiling_s=5), pods=PODS[:2], evidence_dir=None) -> HangWatch:
    def connect():
        return dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=2), wait_for_workers=False)

    return HangWatch(rank, pods, limits, connect=connect, exit_process=lambda code: exits.append((rank, code)), publish_every_s=0.2,
                     evidence_dir=evidence_dir)  # fmt: skip


@pytest.mark.timeout(60)
def test_a_stalled_world_with_a_frozen_rank_ends_with_its_name(store_port, capsys, tmp_path):
    exits: list[tuple[int, int]] = []
    healthy, frozen = watch_of(0, store_port, exits, evidence_dir=tmp_path / "hangs"), watch_of(1, store_port, exits)
    with healthy:
        with frozen:
            for step in (1, 2, 3):
                healthy.beat(step)
                frozen.beat(step)
            wait_for(lambda: published_step(store_port, 1) == 3, 10, "rank 1's heartbeat at step 3 in the store")
        # rank 1's process stops: no heartbeat, no step; rank 0 waits for it in its next collective,
        # from now (not from its step, which a slow wait above could put past the bound while rank 1 still beat)
        healthy.beat(3)
        wait_for(lambda: exits, 30, "the healthy rank ending its process")
    assert exits == [(0, EXIT_HUNG)]
    out = capsys.readouterr().out
    assert "[HANG] no training progress for" in out, out
    assert "after global step 3: rank 1 stopped running (no heartbeat): rank 1 in pod ddp-1" in out, out
    assert "(at global step 3 or later" in out, out
    # the evidence: rank 0's stacks, every thread's, in the directory the line names
    (directory,) = (tmp_path / "hangs").iterdir()
    assert f"{HANG_EVIDENCE}{directory}/" in out, out
    stacks = (directory / "rank-0.txt").read_text()
    assert stacks.startswith("rank 0 in pod ddp-0: no progress for ") and "after global step 3; rank 1 stopped running" in stacks, stacks
    assert "Current thread 0x" in stacks and "_watch_loop" in stacks and "test_trainer_hang_watch.py" in stacks, stacks


@pytest.mark.timeout(60)
def test_the_ranks_that_end_a_world_leave_their_stacks_in_one_directory(store_port, capsys, tmp_path):
    """Ranks 0 and 1 wait on frozen rank 2: each ends the world and writes its stacks, both into the
    directory the first of them named in the store."""
    exits: list[tuple[int, int]] = []
    watches = [watch_of(rank, store_port, exits, pods=PODS, evidence_dir=tmp_path / "hangs") for rank in range(3)]
    for watch in watches:
        watch.__enter__()
    try:
        for step in (1, 2, 3):
            for watch in watches:
                watch.beat(step)
        wait_for(lambda: published_step(store_port, 2) == 3, 10, "rank 2's heartbeat at step 3 in the store")
        watches[2].__exit__(None, None, None)  # rank 2's process stops
        for watch in watches[:2]:
            watch.beat(3)
        wait_for(lambda: len(exits) == 2, 30, "ranks 0 and 1 ending their processes")
    finally:
        for watch in watches[:2]:
            watch.__exit__(None, None, None)
    (directory,) = (tmp_path / "hangs").iterdir()
    assert sorted(path.name for path in directory.iterdir()) == ["rank-0.txt", "rank-1.txt"]


class ReadsSignalled:
    """A store client that sets `read` when its owner reads a heartbeat: the moment a stalled watch takes its first reading."""

    def __init__(self, store: dist.Store):
        self.store = store
        self.read = threading.Event()

    def set(self, key, value):
        self.store.set(key, value)

    def check(self, keys):
        return self.store.check(keys)

    def get(self, key):
        self.read.set()
        return self.store.get(key)


@pytest.mark.timeout(60)
def test_progress_between_the_two_readings_discards_them_and_the_verdict_comes_from_later_ones(store_port, capsys):
    exits: list[tuple[int, int]] = []
    clients: list[ReadsSignalled] = []

    def connect():
        clients.append(ReadsSignalled(dist.TCPStore("127.0.0.1", store_port, is_master=False, timeout=timedelta(seconds=2), wait_for_workers=False)))
        return clients[-1]

    healthy = HangWatch(0, PODS[:2], HangLimits(floor_s=1, ceiling_s=5), connect=connect,
                        exit_process=lambda code: exits.append((0, code)), publish_every_s=0.2)  # fmt: skip
    frozen = watch_of(1, store_port, exits)
    with healthy:
        reading = clients[1]  # the watch thread's client (the first one publishes)
        with frozen:
            healthy.beat(3)
            frozen.beat(3)
            # rank 0 stalls past its bound while rank 1 still runs: rank 0 takes its first reading
            assert reading.read.wait(10), "rank 0's watch never read the heartbeats"
            healthy.beat(3)  # then the world moves on, and only after that does rank 1 stop
            time.sleep(0.5)
        wait_for(lambda: exits, 30, "the healthy rank ending its process")
    assert exits == [(0, EXIT_HUNG)]
    out = capsys.readouterr().out
    assert "rank 1 stopped running (no heartbeat): rank 1 in pod ddp-1" in out, out


@pytest.mark.timeout(60)
def test_a_world_waiting_on_a_busy_rank_is_not_ended_and_progress_resets_the_clock(store_port):
    exits: list[tuple[int, int]] = []
    waiting, writing = watch_of(0, store_port, exits), watch_of(1, store_port, exits)
    done = threading.Event()
    with waiting, writing:
        waiting.beat(1)
        writing.beat(1)
        with writing.busy("writing epoch 1's model"):
            # longer than the 1-s floor and the reads that confirm a hang: rank 0 waits all along
            done.wait(8)
            assert waiting.stalled_for() > waiting.bound()
        assert exits == []
        waiting.beat(2)
        writing.beat(2)
        assert waiting.stalled_for() < waiting.bound()
    assert exits == []


def test_a_world_of_one_or_a_zero_ceiling_starts_no_watch():
    exits: list = []
    for watch in (HangWatch(0, PODS[:1], HangLimits()), HangWatch(0, PODS[:2], HangLimits(ceiling_s=0), connect=lambda: 1 / 0)):
        with watch:
            watch.beat(1)
        assert not watch.enabled
    assert exits == []
