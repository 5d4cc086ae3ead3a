"""Faults nobody stages on purpose, under the product's defaults: both pods deleted at once with no
grace period (no SIGTERM checkpoint: the newest periodic one serves); every training process
SIGKILLed while a checkpoint is being written (the torn one must not count); then the newest
checkpoint damaged on the volume at its own size while every training process is killed (the world
must pass over it for the one before). Each pod's torchrun restarts its workers after a kill. The
run ends as an uninterrupted run.

On the controllers' cluster (a plain Job, which none of them manages), beside the test cluster's
journeys (tests/conftest.py). The losses of one pod at a time are in test_cluster_world_lifecycle.
"""

from __future__ import annotations

import os
import signal
from datetime import datetime, timezone
from pathlib import Path

import pytest
from trainer_testing import flip_a_bit, same_result

from cluster_testing import (
    CHECKPOINT_EVERY, DISRUPTED_RUN, NAMESPACE, all_logs, final_done_lines, freeze_training, job_condition, newest_checkpoint,
    pod_name, pod_resumed_lines, print_reform_timeline, resumed_step, run_dir, training_processes, wait_for, wait_for_checkpoint_after, wait_for_reform,
    wait_for_world,
)  # fmt: skip

pytestmark = pytest.mark.timeout(1500)


def test_pods_lost_together_without_grace_a_kill_mid_write_and_a_damaged_checkpoint_end_as_an_uninterrupted_run(
    controllers_cluster, controllers_dev_image, controllers_stack, reference_result
):
    cluster = controllers_cluster
    expected = reference_result(DISRUPTED_RUN)
    controllers_stack.up(run__args=DISRUPTED_RUN)
    wait_for_world(cluster)

    before = wait_for_checkpoint_after(cluster, CHECKPOINT_EVERY - 1)
    lost_at = datetime.now(timezone.utc)
    cluster.kubectl("delete", "pod", pod_name(cluster, 0), pod_name(cluster, 1), "-n", NAMESPACE, "--grace-period=0",
                    "--force", "--wait=false")  # fmt: skip
    line, seconds = wait_for_reform(cluster, 0)  # a new pod 0: a new log
    print(f"\n[figures] pods 0 and 1 deleted at once, no grace period: the world resumed {seconds:.1f} s later, from {line.split()[3]}")
    assert resumed_step(line) >= before["step"], (line, before)
    print_reform_timeline(cluster, "pods 0 and 1 deleted at once", lost_at, [0, 1])

    torn, seen, lost_at = _kill_training_during_a_checkpoint_write(cluster)
    line, seconds = wait_for_reform(cluster, seen)
    print(f"\n[figures] every training process killed while ckpt-{torn:08d} was written: the world resumed "
          f"{seconds:.1f} s later, from {line.split()[3]}")  # fmt: skip
    assert resumed_step(line) < torn, (line, torn)
    print_reform_timeline(cluster, "every training process killed", lost_at, [])

    wait_for_checkpoint_after(cluster, torn)
    seen = len(pod_resumed_lines(cluster))
    frozen = [pid for index in (0, 1) for pid in freeze_training(cluster, pod_name(cluster, index))]
    # Nothing commits a checkpoint now: the newest stays the newest until the world resumes.
    checkpoints = run_dir(cluster) / "checkpoints"
    steps = sorted(int(path.name[5:13]) for path in checkpoints.glob("ckpt-*.json"))
    damaged, older = steps[-1], steps[-2]
    flip_a_bit(checkpoints / f"ckpt-{damaged:08d}" / "__1_0.distcp")
    lost_at = datetime.now(timezone.utc)
    for pid in frozen:
        os.kill(pid, signal.SIGKILL)
    line, seconds = wait_for_reform(cluster, seen)
    print(f"\n[figures] newest checkpoint damaged, every training process killed: the world resumed {seconds:.1f} s later, "
          f"from {line.split()[3]}")  # fmt: skip
    log = all_logs(cluster, NAMESPACE, pod_name(cluster, 0))
    assert f"[CKPT] skipping ckpt-{damaged:08d}: __1_0.distcp's CRC-32 is " in log, log[-3000:]
    assert resumed_step(line) == older, (line, damaged, older)
    print_reform_timeline(cluster, "newest checkpoint damaged, every training process killed", lost_at, [])

    assert wait_for(lambda: job_condition(cluster), 900, "the Job to end", interval=3) == "Complete"
    finals = final_done_lines(cluster)
    assert [same_result(line) for line in finals] == [expected.result()] * 2
    assert newest_checkpoint(cluster)["step"] > damaged


def _kill_training_during_a_checkpoint_write(cluster, attempts: int = 20) -> tuple[int, int, datetime]:
    """SIGKILLs every training process of both pods while a checkpoint is being written (its shards'
    directory there, its record not yet); returns that checkpoint's step, pod 0's count of resumes
    before the kill, and the kill's time. The processes are stopped (SIGSTOP) the moment the directory
    appears: if the record is not there then, no stopped process can write it, and they are killed;
    if the write won the race, they go on (SIGCONT) and a later checkpoint is tried. On a quiet
    machine a 1M-parameter model's write once won three races of a kill in a row."""
    checkpoints = run_dir(cluster) / "checkpoints"
    for _ in range(attempts):
        recorded = newest_checkpoint(cluster)["step"]
        training = [pid for index in (0, 1) for pid in training_processes(cluster, pod_name(cluster, index))]
        seen = len(pod_resumed_lines(cluster))
        writing = wait_for(lambda: _being_written(checkpoints, recorded), 120, "a checkpoint being written", interval=0.001)
        for pid in training:
            os.kill(pid, signal.SIGSTOP)
        if not (checkpoints / f"ckpt-{writing:08d}.json").exists():
            killed_at = datetime.now(timezone.utc)
            for pid in training:
                os.kill(pid, signal.SIGKILL)
            wait_for(lambda: all(_dead(pid) for pid in training), 30, "the training processes to die", interval=0.05)
            return writing, seen, killed_at
        for pid in training:
            os.kill(pid, signal.SIGCONT)
    raise AssertionError(f"no checkpoint write was caught before its record in {attempts} attempts")


def _dead(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def _being_written(checkpoints: Path, recorded: int) -> int | None:
    for entry in os.scandir(checkpoints):
        name = entry.name
        if entry.is_dir() and name.startswith("ckpt-") and int(name[5:13]) > recorded:
            return int(name[5:13])
    return None
