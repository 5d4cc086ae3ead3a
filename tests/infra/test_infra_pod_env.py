"""The pure pod-env and manifest functions, called directly (no Pulumi resources)."""

from __future__ import annotations

import logging
from decimal import Decimal

import pulumi
import pytest

import infra_harness as harness
from ddp_infra import config as stack_config
from ddp_infra import pod
from ddp_infra.world import World
from trainer import contract


def env_for(**changes) -> dict[str, dict]:
    parsed = stack_config.parse(harness.stack_config_with("prod", **changes))
    world = World.from_config(parsed, harness.PROJECT, "prod")
    return {var["name"]: var for var in pod.pod_env(world)}


@pulumi.runtime.test
def test_socket_interface_goes_to_nccl_and_gloo():
    env = env_for(network__socketIfname="^lo,docker0")
    assert env["NCCL_SOCKET_IFNAME"]["value"] == env["GLOO_SOCKET_IFNAME"]["value"] == "^lo,docker0"
    assert "NCCL_SOCKET_IFNAME" not in env_for(network={"infiniband": True})


@pytest.mark.parametrize("infiniband, disabled", [(True, "0"), (False, "1")])
@pulumi.runtime.test
def test_infiniband_switch(infiniband, disabled):
    assert env_for(network={"infiniband": infiniband})["NCCL_IB_DISABLE"]["value"] == disabled


@pulumi.runtime.test
def test_etcd_endpoint_replaces_pod_zero_as_rendezvous_store():
    env = env_for(rendezvous={"backend": "etcd-v2", "endpoint": "etcd.infra:2379"})
    assert env["RDZV_ENDPOINT"]["value"] == env["PET_RDZV_ENDPOINT"]["value"] == "etcd.infra:2379"
    assert env["PET_RDZV_BACKEND"]["value"] == "etcd-v2"


@pulumi.runtime.test
def test_the_rendezvous_heartbeat_is_a_second_unless_the_stack_says_otherwise():
    assert env_for()["RDZV_KEEP_ALIVE_INTERVAL"]["value"] == "1"
    assert env_for(rendezvous__keepAliveIntervalSeconds=5)["RDZV_KEEP_ALIVE_INTERVAL"]["value"] == "5"


@pulumi.runtime.test
def test_the_missed_heartbeats_allowed_reach_the_pods_only_when_the_stack_changes_them():
    """Unset, the trainer's own default holds, and the pods of a stack from before stay as they were."""
    assert "RDZV_KEEP_ALIVE_MAX_ATTEMPTS" not in env_for()
    assert "RDZV_KEEP_ALIVE_MAX_ATTEMPTS" not in env_for(rendezvous__keepAliveMaxAttempts=contract.KEEP_ALIVE_MAX_ATTEMPTS)
    assert env_for(rendezvous__keepAliveMaxAttempts=8)["RDZV_KEEP_ALIVE_MAX_ATTEMPTS"]["value"] == "8"


@pytest.mark.parametrize("resources, nproc, threads", [
    ({"requests": {"cpu": "96"}, "limits": {}}, 8, "12"),  # the prod stack: 8 GPUs and their processes share 96 CPUs
    ({"requests": {"cpu": "500m"}, "limits": {}}, 1, "1"),  # less than a CPU: one thread, not none
    ({"requests": {"cpu": "2"}, "limits": {"cpu": "7"}}, 2, "3"),  # the limit, where there is one, is what the pod can use
    ({"requests": {"cpu": "3"}, "limits": {}}, 8, "1"),
])
@pulumi.runtime.test
def test_each_training_process_computes_on_its_share_of_the_pods_cpu(resources, nproc, threads):
    env = env_for(resources=resources, gpusPerNode=nproc)
    assert env["NPROC_PER_NODE"]["value"] == str(nproc)
    assert env["OMP_NUM_THREADS"]["value"] == threads


@pulumi.runtime.test
def test_the_users_own_thread_count_wins_and_a_pod_without_cpu_keeps_torchs_default():
    env = list(env_for(env={"OMP_NUM_THREADS": "6"}).values())
    assert [var for var in env if var["name"] == "OMP_NUM_THREADS"] == [{"name": "OMP_NUM_THREADS", "value": "6"}]
    assert "OMP_NUM_THREADS" not in env_for(resources={"requests": {"memory": "1Gi"}, "limits": {}})


def trainer_container(**changes) -> dict:
    parsed = stack_config.parse(harness.stack_config_with("prod", **changes))
    return pod.container(World.from_config(parsed, harness.PROJECT, "prod"))


@pytest.mark.parametrize("seconds, period, failures", [(20, 5, 4), (37, 5, 8), (9, 4, 3), (1, 1, 1)])
@pulumi.runtime.test
def test_a_pod_that_answers_no_liveness_probe_for_the_stacks_seconds_is_killed_at_once(seconds, period, failures):
    trainer = trainer_container(workload__liveness__seconds=seconds, workload__liveness__port=31338)
    probe = trainer["livenessProbe"]
    assert probe["httpGet"] == {"path": contract.LIVENESS_PATH, "port": "liveness"}
    assert {"name": "liveness", "containerPort": 31338, "protocol": "TCP"} in trainer["ports"]
    assert (probe["periodSeconds"], probe["failureThreshold"]) == (period, failures)
    assert seconds <= period * failures < seconds + period and probe["timeoutSeconds"] <= period
    assert probe["terminationGracePeriodSeconds"] == 1  # not the pod's 120 s for a checkpoint it cannot write
    env = {var["name"]: var for var in trainer["env"]}
    assert env["LIVENESS_PORT"]["value"] == "31338"


@pulumi.runtime.test
def test_without_liveness_seconds_the_pod_has_no_probe_no_port_and_no_liveness_env():
    trainer = trainer_container(workload__liveness__seconds=0)
    assert "livenessProbe" not in trainer
    assert [port["name"] for port in trainer["ports"]] == ["rdzv"]
    assert "LIVENESS_PORT" not in {var["name"] for var in trainer["env"]}


@pulumi.runtime.test
def test_shm_size_models_dir_and_extra_env():
    env = env_for(shmSize="3Gi", env={"EXTRA_FLAG": "$(NODE_RANK)-x"})
    assert env["SHM_SIZE_BYTES"]["value"] == str(3 * 2**30)
    assert env["MODELS_DIR"]["value"] == "/models"
    assert list(env)[-1] == "EXTRA_FLAG"
    assert "MODELS_DIR" not in env_for(storage={"datasets": {"size": "1Gi"}})


@pulumi.runtime.test
def test_run_name_is_stable_and_defaults_to_the_workload():
    assert env_for(nodes="64")["RUN_NAME"] == env_for(nodes="4")["RUN_NAME"]
    assert env_for(run={"name": None}, workload__name="llm")["RUN_NAME"]["value"] == "llm"


@pytest.mark.parametrize("text, amount", [("500m", "0.5"), ("8Gi", 8 * 2**30), ("100G", 10**11), ("1e3", 1000), ("4", 4)])
@pulumi.runtime.test
def test_quantities(text, amount):
    assert stack_config.parse_quantity(text) == Decimal(amount)


@pulumi.runtime.test
def test_single_node_claims_on_many_nodes_are_warned_about(caplog):
    values = harness.with_path(harness.stack_file_config("dev"), "nodes", "4")
    with caplog.at_level(logging.WARNING):
        evaluation = harness.evaluate(values)
    assert evaluation.error is None
    assert "ddp-infra:storage.outputs.accessMode is ReadWriteOnce with nodes=4" in caplog.text


@pytest.mark.parametrize("kind, nodes, warned", [("statefulset", "2", True), ("statefulset", "1", False), ("job", "2", False), ("jobset", "2", False)])
def test_a_statefulset_of_several_pods_is_warned_that_a_lost_node_holds_it_until_an_operator_acts(caplog, kind, nodes, warned):
    values = harness.with_path(harness.with_path(harness.stack_file_config("dev"), "workload.kind", kind), "nodes", nodes)
    with caplog.at_level(logging.WARNING):
        evaluation = harness.evaluate(values)
    assert evaluation.error is None
    said = f"ddp-infra:workload.kind is statefulset with nodes={nodes}: a pod on a lost node is never replaced" in caplog.text
    assert said == warned, caplog.text
    if warned:
        assert "taint such a node node.kubernetes.io/out-of-service=nodeshutdown:NoExecute or delete its Node object" in caplog.text

