"""A task of one's own on the cluster: the example project (examples/shapes) in its own image, built
FROM the trainer's by its Dockerfile (toolchain/images.sh), deployed by the real `pulumi up` under the
name its stack file gives it. Its world loses a pod and ends as an uninterrupted run; a fresh run
resized from 2 pods to 3 while it trains feeds its model every sample of each epoch once."""

from __future__ import annotations

import shutil

import pytest
from trainer_testing import REPO, same_result, with_option

from cluster_testing import (
    CHECKPOINT_EVERY, NAMESPACE, final_done_lines, job_condition, newest_checkpoint, pod_name, pod_resumed_lines,
    resumed_step, run_dir, wait_for, wait_for_checkpoint_after, wait_for_reform, wait_for_world,
)  # fmt: skip
from elastic_journey import RecordedRun, every_sample_of_each_epoch_trained_once
from trainer import contract

pytestmark = pytest.mark.timeout(900)

SAMPLES, BATCH, SEED = 1024, 32, 7
# Two pods of 16 steps an epoch, paced as the journeys' smoke runs are (cluster_testing.paced).
RUN_ARGS = [
    "-m", "trainer.train", "shapes", "--epochs", "6", "--batch", str(BATCH), "--lr", "1e-2", "--seed", str(SEED),
    "--checkpoint-every", str(CHECKPOINT_EVERY), "--log-every", "8", "--pg-timeout", "60", "--batch-seconds", "0.1",
    "--task-option", f"samples={SAMPLES}", "--task-option", "size=16",
]  # fmt: skip
RECORD = RecordedRun("shapes-samples", SAMPLES, SEED, BATCH)
# ...long enough that it still trains when the resize's `up` reaches it (about 40 s at the pace)
RESIZED_RUN = [*with_option(RUN_ARGS, "--epochs", "24"), "--sample-record", f"{contract.OUT_MOUNT}/{RECORD.directory}"]
SMALL_PODS = {"resources__requests__cpu": "500m"}  # three pods on the node's two CPUs


def test_a_task_of_ones_own_in_its_image_ends_a_lost_pods_run_exactly_and_a_resized_run_trains_every_sample_once(
    cluster, shapes_image, dev_stack, reference_result, installed_example
):
    expected = reference_result(RUN_ARGS, PYTHONPATH=f"{REPO}:{installed_example}")
    image = {"image__name": shapes_image}
    dev_stack.up(run__args=RUN_ARGS, **image, **SMALL_PODS)
    wait_for_world(cluster)
    before = wait_for_checkpoint_after(cluster, CHECKPOINT_EVERY - 1)
    seen = len(pod_resumed_lines(cluster))
    cluster.kubectl("delete", "pod", pod_name(cluster, 1), "-n", NAMESPACE, "--wait=false")
    line, _ = wait_for_reform(cluster, seen)
    assert resumed_step(line) >= before["step"], (line, before)
    assert wait_for(lambda: job_condition(cluster), 600, "the Job to end", interval=3) == "Complete"
    finals = final_done_lines(cluster)
    assert sorted(line["rank"] for line in finals) == ["0", "1"]
    assert [same_result(line) for line in finals] == [expected.result()] * 2

    # A fresh run (the ended one's directory removed), resized while it trains.
    shutil.rmtree(run_dir(cluster))
    dev_stack.up(run__args=RESIZED_RUN, **image, **SMALL_PODS)
    wait_for_world(cluster)
    wait_for_checkpoint_after(cluster, CHECKPOINT_EVERY - 1)
    dev_stack.up(nodes="3", run__args=RESIZED_RUN, **image, **SMALL_PODS)
    stopped = newest_checkpoint(cluster)
    assert (stopped["reason"], stopped["world_size"]) == ("sigterm", 2), stopped
    line, _ = wait_for_reform(cluster, 0)
    assert "world of 3 (was 2)" in line and f"sample {stopped['samples_in_epoch']}/" in line, line
    assert wait_for(lambda: job_condition(cluster), 600, "the resized Job to end", interval=3) == "Complete"
    every_sample_of_each_epoch_trained_once(cluster, 24, run=RECORD)
