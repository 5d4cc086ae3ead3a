"""`workload.kind: jobset` on a cluster running the real JobSet controller (built from its Go module
by toolchain/build.sh, started by LocalCluster as an add-on): the stack's JobSet admitted by its
webhooks, pods named and reachable as the env contract says, the run completing, and any pod's
loss restarting the whole world, which resumes from its checkpoint.

The first test runs the pause image in place of the trainer (the JobSet's mechanics need no
training); the others run the trainer image built by toolchain/images.sh. Figures (time to
restart the world, to resume) are printed for the README.
"""

from __future__ import annotations

import json
import time

import pytest
from trainer_testing import done_lines, epoch_records, same_result

from cluster_testing import (
    CHECKPOINT_EVERY, DISRUPTED_RUN, NAMESPACE, SERVICE, STORE, WORKLOAD, all_logs, final_done_lines, get, kill_container,
    jobset_status, newest_checkpoint, paced, pod_resumed_lines, resumed_step, run_dir, terminal_state, wait_for, world_pods, world_running,
)  # fmt: skip
from trainer import contract

pytestmark = [pytest.mark.timeout(1500), pytest.mark.controllers("jobset")]

JOBSET = {"workload__kind": contract.JOBSET}
# The disrupted run at a pace (cluster_testing.paced): its whole world's restarts are Kubernetes' waits.
RUN_ARGS = paced(DISRUPTED_RUN, 8)
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"


def world_uids(cluster) -> set[str]:
    return {pod["metadata"]["uid"] for pod in world_pods(cluster).values()}


def wait_for_world_restart(cluster, old: set[str], restarts: int, nodes: int = 2) -> dict[str, float]:
    """Waits until the JobSet counts `restarts` and a whole new world runs; the seconds each took."""
    started = time.monotonic()
    wait_for(lambda: jobset_status(cluster).get("restarts", 0) >= restarts, 300, f"JobSet restarts = {restarts}")
    counted = time.monotonic() - started
    wait_for(lambda: world_running(cluster, nodes) and not world_uids(cluster) & old, 300, "a whole new world Running")
    assert jobset_status(cluster)["restarts"] == restarts
    labels = {pod["metadata"]["labels"][RESTART_ATTEMPT_LABEL] for pod in world_pods(cluster).values()}
    assert labels == {str(restarts)}, labels
    return {"restart counted": round(counted, 1), "new world running": round(time.monotonic() - started, 1)}


def test_the_controller_runs_the_stacks_jobset_as_the_env_contract_says(controllers_cluster, pause_stack):
    cluster = controllers_cluster
    pause_stack.up(**JOBSET)
    wait_for(lambda: world_running(cluster), 300, "both pods Running", interval=2)
    jobset = get(cluster, "jobset", WORKLOAD, NAMESPACE)
    # JobSet's mutating webhook completed it (its default startup policy): the webhooks are in the path.
    assert jobset["spec"]["startupPolicy"] == {"startupPolicyOrder": "AnyOrder"}, jobset["spec"]

    world = world_pods(cluster)
    job = f"{WORKLOAD}-{contract.JOBSET_REPLICATED_JOB}-0"
    for index, pod in world.items():
        # Each pod is its Job's: the hostname the contract names, under the stack's own Service.
        assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == (f"{job}-{index}", SERVICE)
        assert pod["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] == WORKLOAD
        env = {var["name"]: var.get("value") for var in pod["spec"]["containers"][0]["env"]}
        assert env[contract.MASTER_ADDR.name] == f"{job}-0.{SERVICE}"
        assert env[contract.WORKLOAD_KIND.name] == contract.JOBSET
    # The stack's Service selects them and publishes pod 0's hostname, the name MASTER_ADDR resolves;
    # JobSet made no Service of its own: the stack's two are all there are.
    slices = json.loads(cluster.kubectl("get", "endpointslices", "-n", NAMESPACE, "-l", f"kubernetes.io/service-name={SERVICE}",
                                        "-o", "json").stdout)["items"]  # fmt: skip
    hostnames = {endpoint.get("hostname") for s in slices for endpoint in s.get("endpoints") or []}
    assert hostnames == {f"{job}-0", f"{job}-1"}, hostnames
    services = json.loads(cluster.kubectl("get", "services", "-n", NAMESPACE, "-o", "json").stdout)["items"]
    assert [s["metadata"]["name"] for s in services] == [SERVICE, STORE]

    # One pod killed: its Job fails at once and JobSet recreates the whole world.
    old = world_uids(cluster)
    kill_container(cluster, world[1]["metadata"]["name"])
    figures = wait_for_world_restart(cluster, old, restarts=1)
    print(f"\n[figures] JobSet, pod 1 killed (pause image): seconds to {figures}")


def test_the_dev_run_completes_as_a_jobset(controllers_cluster, controllers_dev_image, controllers_stack):
    cluster = controllers_cluster
    controllers_stack.up(**JOBSET)
    started = time.monotonic()
    assert wait_for(lambda: terminal_state(cluster), 600, "the JobSet to end", interval=3) == "Completed"
    print(f"\n[figures] JobSet dev run: completed {time.monotonic() - started:.0f} s after up")
    assert jobset_status(cluster).get("restarts", 0) == 0
    finished = world_pods(cluster)
    assert sorted(finished) == [0, 1]
    done = {index: done_lines(all_logs(cluster, NAMESPACE, pod["metadata"]["name"])) for index, pod in finished.items()}
    assert {line["rank"] for lines in done.values() for line in lines} == {"0", "1"}, done
    assert len({line["params_sum"] for lines in done.values() for line in lines}) == 1, done
    # Every pod met the others at pod 0's JobSet hostname under the stack's Service.
    master = f"{WORKLOAD}-{contract.JOBSET_REPLICATED_JOB}-0-0.{SERVICE}"
    for pod in finished.values():
        assert f"master={master}:" in all_logs(cluster, NAMESPACE, pod["metadata"]["name"])
    outputs = run_dir(cluster)
    assert (outputs / "epoch-1").is_dir() and (outputs / "epoch-2").is_dir(), sorted(outputs.iterdir())
    metrics = epoch_records(outputs)
    assert [m["epoch"] for m in metrics] == [1, 2]
    assert sorted((outputs / "checkpoints").glob("ckpt-*.json")), "no checkpoint was committed"
    assert "Completed" in cluster.kubectl(*controllers_stack.outputs["kubectlRunStatus"].split()[1:]).stdout


def test_losing_any_pod_restarts_the_whole_world_from_its_checkpoint(controllers_cluster, controllers_dev_image, controllers_stack, reference_result):
    cluster = controllers_cluster
    expected = reference_result(RUN_ARGS)
    controllers_stack.up(run__args=RUN_ARGS, **JOBSET)
    wait_for(lambda: world_running(cluster), 300, "both pods Running", interval=2)
    figures = {}
    losses = (
        ("pod 1 deleted", lambda: cluster.kubectl("delete", "pod", world_pods(cluster)[1]["metadata"]["name"], "-n", NAMESPACE, "--wait=false")),
        ("pod 0 killed", lambda: kill_container(cluster, world_pods(cluster)[0]["metadata"]["name"])),
    )  # fmt: skip
    for restarts, (what, lose) in enumerate(losses, start=1):
        before = wait_for(lambda: (r := newest_checkpoint(cluster))["step"] >= CHECKPOINT_EVERY * restarts - 1 and r, 300,
                          f"a checkpoint before '{what}'")  # fmt: skip
        old = world_uids(cluster)
        started = time.monotonic()
        lose()
        figures[what] = wait_for_world_restart(cluster, old, restarts)
        line = wait_for(lambda: (lines := pod_resumed_lines(cluster)) and lines[-1], 300, "the new world to resume", interval=1)
        figures[what]["resumed"] = round(time.monotonic() - started, 1)
        # At most one checkpoint interval is lost: the new world resumes from the newest checkpoint.
        assert resumed_step(line) >= before["step"], (what, line, before)
        print(f"\n[figures] JobSet, {what}: seconds to {figures[what]}; {line}")

    assert wait_for(lambda: terminal_state(cluster), 900, "the JobSet to end", interval=3) == "Completed"
    assert jobset_status(cluster)["restarts"] == len(losses)
    finals = final_done_lines(cluster)
    assert sorted(line["rank"] for line in finals) == ["0", "1"]
    # The same final loss and weights as a world never disrupted: each restart resumed exactly.
    assert [same_result(line) for line in finals] == [expected.result()] * 2
