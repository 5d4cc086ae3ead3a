"""The fit check (ddp_infra/fit.py) on a real node, through the real engine: a world the node can
never hold is refused by `pulumi preview` and `pulumi up` before anything exists; asked to warn
instead, `up` creates it and the pod that cannot fit waits, unscheduled, which `up`, waiting for the
world to run (ddp_infra/world_wait.py), says, and fails with at the end of its wait.

The pods run the pause binary, each asking for the node's whole CPU: the node holds one of them.
On the controllers' cluster, whose journeys leave room in the run for this one.
"""

from __future__ import annotations

import pytest

from cluster_testing import NAMESPACE, UpFailed, node_cpu, pause_pod_resources, pods, wait_for

pytestmark = pytest.mark.timeout(600)


def test_a_world_the_node_can_never_hold_is_refused_before_anything_exists_unless_asked_to_warn(controllers_cluster, pause_stack):
    cluster, stack = controllers_cluster, pause_stack
    cpu = node_cpu(cluster)
    whole_node = {"nodes": 2, **pause_pod_resources(cpu)}
    preview = stack.preview(**whole_node)
    assert preview.returncode != 0, preview.describe()
    assert "the world cannot fit in the cluster; nothing was created" in preview.output, preview.describe()
    assert "ddp-infra:nodes asks for 2 pods at once, each requesting cpu " in preview.output
    assert "the cluster's 1 node(s) can ever hold 1 of them:" in preview.output
    assert f"node {cluster.node_name}: 1 (allocatable cpu {cpu}, memory " in preview.output
    with pytest.raises(UpFailed) as refused:
        stack.up(**whole_node)
    assert "the world cannot fit in the cluster; nothing was created" in refused.value.result.output
    assert cluster.kubectl("get", "namespace", NAMESPACE, check=False).returncode != 0

    warned = stack.preview(**whole_node, scheduling__fitCheck="warn")
    assert warned.returncode == 0, warned.describe()
    assert "the world may not fit the cluster: ddp-infra:nodes asks for 2 pods at once" in warned.output

    # Created anyway and waited for: `pulumi up` says why the world does not run, and fails at the
    # end of its wait, as workload.waitFailure asks.
    with pytest.raises(UpFailed) as timed_out:
        stack.up(**whole_node, scheduling__fitCheck="warn", workload__waitFor="running", workload__waitSeconds="30", workload__waitFailure="error")
    output = timed_out.value.result.output
    assert "waiting for the world to be running: unschedulable: 0/1 nodes are available: 1 Insufficient cpu" in output, output
    assert "error: world: not running after 30 s: unschedulable: 0/1 nodes are available: 1 Insufficient cpu" in output, output
    waiting = wait_for(lambda: _one_running_one_unscheduled(cluster), 180, "one pod running and the other unscheduled")
    assert "Insufficient cpu" in waiting, waiting


def _one_running_one_unscheduled(cluster) -> str | None:
    """The unscheduled pod's PodScheduled message, once one pod runs and the other cannot be scheduled."""
    world = pods(cluster, NAMESPACE).values()
    phases = [pod["status"].get("phase") for pod in world]
    unscheduled = [
        condition.get("message", "")
        for pod in world
        for condition in pod["status"].get("conditions") or []
        if condition["type"] == "PodScheduled" and condition["status"] == "False"
    ]
    return unscheduled[0] if sorted(phases) == ["Pending", "Running"] and unscheduled else None
