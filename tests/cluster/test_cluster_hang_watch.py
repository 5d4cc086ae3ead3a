"""A hung rank under the product's defaults: pod 1's training process stops (SIGSTOP from the
node: a stuck GPU or host; torchrun still runs). The hang watch names it and ends the world within
its 30-s floor, pod 1's torchrun stops the frozen process, and the world re-forms from the newest
checkpoint and ends as an uninterrupted run.

On the controllers' cluster (a plain Job, which none of them manages), so that it runs beside the
test cluster's journeys (tests/conftest.py).
"""

from __future__ import annotations

import pytest
from trainer_testing import same_result

from cluster_testing import (
    CHECKPOINT_EVERY, DISRUPTED_RUN, NAMESPACE, RUN, all_logs, final_done_lines, freeze_training, job_condition, pod_name,
    pod_resumed_lines, resumed_step, run_dir, wait_for, wait_for_checkpoint_after, wait_for_reform, wait_for_world,
)  # fmt: skip
from trainer import contract
from trainer.hang_watch import FLIGHT_RECORDS
from trainer.lines import hang_evidence
from trainer.outputs import HANGS

pytestmark = pytest.mark.timeout(1500)

# The disrupted run with the product's default --pg-timeout (30 minutes): only the hang watch can end a hang in time.
HANG_RUN = DISRUPTED_RUN[: DISRUPTED_RUN.index("--pg-timeout")]


def test_a_frozen_pod_is_found_by_the_hang_watch_and_the_world_re_forms_exactly(
    controllers_cluster, controllers_dev_image, controllers_stack, reference_result
):
    cluster = controllers_cluster
    expected = reference_result(HANG_RUN)
    controllers_stack.up(run__args=HANG_RUN)
    wait_for_world(cluster)
    before = wait_for_checkpoint_after(cluster, CHECKPOINT_EVERY - 1)
    seen = len(pod_resumed_lines(cluster))
    pod_0, pod_1 = pod_name(cluster, 0), pod_name(cluster, 1)
    freeze_training(cluster, pod_1)

    line, seconds = wait_for_reform(cluster, seen)
    print(f"\n[figures] pod 1's training process frozen: the world resumed {seconds:.1f} s later, from {line.split()[3]}")
    assert resumed_step(line) >= before["step"], (line, before)
    hangs = [row for row in all_logs(cluster, NAMESPACE, pod_0).splitlines() if row.startswith("[HANG]")]
    assert len(hangs) == 1, hangs
    assert f"in pod {pod_1}" in hangs[0] and "(bound 30 s)" in hangs[0], hangs[0]
    # the live rank's stacks on the outputs claim, in the directory the line names under /out/<run>/hangs/
    named = hang_evidence(hangs[0])
    assert named.startswith(f"{contract.OUT_MOUNT}/{RUN}/{HANGS}/"), hangs[0]
    evidence = run_dir(cluster) / HANGS / named.rsplit("/", 1)[1]
    (stacks,) = evidence.glob("rank-*.txt")  # the frozen rank's process left none
    live = stacks.stem.split("-")[1]
    assert stacks.read_text().startswith(f"rank {live} in pod {pod_0}: no progress for "), stacks.read_text()[:400]
    # its flight recorder too: the collective it waited in, never completed, and torch's dump beside it
    assert "  not completed: #" in stacks.read_text(), stacks.read_text()[:2000]
    assert [path.name for path in (evidence / FLIGHT_RECORDS).iterdir()] == [f"rank_{live}"]

    assert wait_for(lambda: job_condition(cluster), 900, "the Job to end", interval=3) == "Complete"
    finals = final_done_lines(cluster)
    assert [same_result(line) for line in finals] == [expected.result()] * 2
