"""Faults nobody stages on purpose, under the product's defaults: both pods deleted at once with no
grace period (no SIGTERM checkpoint: the newest periodic one serves), then the newest checkpoint
damaged on the volume at its own size while every training process is killed (each pod's torchrun
restarts its workers, and the world must pass over the damaged checkpoint for the one before). The
run ends as an uninterrupted run.

On the controllers' cluster (a plain Job, which none of them manages), beside the test cluster's
journeys (tests/conftest.py). The losses of one pod at a time are in test_cluster_world_lifecycle.
"""

from __future__ import annotations

import os
import signal

import pytest
from trainer_testing import done_lines, same_result

from cluster_testing import (
    CHECKPOINT_EVERY, DISRUPTED_RUN, NAMESPACE, all_logs, flip_a_bit, freeze_training, job_condition, newest_checkpoint,
    pod_name, pod_resumed_lines, resumed_step, run_dir, wait_for, wait_for_checkpoint_after, wait_for_reform,
    wait_for_world, world_pods,
)  # fmt: skip

pytestmark = pytest.mark.timeout(1500)


def test_pods_lost_together_without_grace_and_a_damaged_checkpoint_end_as_an_uninterrupted_run(
    controllers_cluster, controllers_dev_image, controllers_stack, reference_result
):
    cluster = controllers_cluster
    expected = reference_result(DISRUPTED_RUN)
    controllers_stack.up(run__args=DISRUPTED_RUN)
    wait_for_world(cluster)

    before = wait_for_checkpoint_after(cluster, CHECKPOINT_EVERY - 1)
    cluster.kubectl("delete", "pod", pod_name(cluster, 0), pod_name(cluster, 1), "-n", NAMESPACE, "--grace-period=0",
                    "--force", "--wait=false")  # fmt: skip
    line, seconds = wait_for_reform(cluster, 0)  # a new pod 0: a new log
    print(f"\n[figures] pods 0 and 1 deleted at once, no grace period: the world resumed {seconds:.1f} s later, from {line.split()[3]}")
    assert resumed_step(line) >= before["step"], (line, before)

    wait_for_checkpoint_after(cluster, resumed_step(line))
    seen = len(pod_resumed_lines(cluster))
    frozen = [pid for index in (0, 1) for pid in freeze_training(cluster, pod_name(cluster, index))]
    # Nothing commits a checkpoint now: the newest stays the newest until the world resumes.
    checkpoints = run_dir(cluster) / "checkpoints"
    steps = sorted(int(path.name[5:13]) for path in checkpoints.glob("ckpt-*.json"))
    damaged, older = steps[-1], steps[-2]
    flip_a_bit(checkpoints / f"ckpt-{damaged:08d}" / "__1_0.distcp")
    for pid in frozen:
        os.kill(pid, signal.SIGKILL)
    line, seconds = wait_for_reform(cluster, seen)
    print(f"\n[figures] newest checkpoint damaged, every training process killed: the world resumed {seconds:.1f} s later, "
          f"from {line.split()[3]}")  # fmt: skip
    log = all_logs(cluster, NAMESPACE, pod_name(cluster, 0))
    assert f"[CKPT] skipping ckpt-{damaged:08d}: __1_0.distcp's CRC-32 is " in log, log[-3000:]
    assert resumed_step(line) == older, (line, damaged, older)

    assert wait_for(lambda: job_condition(cluster), 900, "the Job to end", interval=3) == "Complete"
    finals = [done_lines(all_logs(cluster, NAMESPACE, pod["metadata"]["name"]))[-1] for pod in world_pods(cluster).values()]
    assert [same_result(line) for line in finals] == [expected.result()] * 2
    assert newest_checkpoint(cluster)["step"] > damaged
