"""The env contract tested from both sides at once.

The Pulumi program's pod env (ddp_infra.pod.pod_env) is resolved the way the kubelet
resolves it for a concrete pod (downward API, secretKeyRef, `$(VAR)` expansion, the
JOB_COMPLETION_INDEX a Job pod gets), then handed to the trainer's own `resolve_world`. Both
sides must arrive at the same world, for every pod of it.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

import infra_harness as harness
from ddp_infra import config as stack_config
from ddp_infra import pod as infra_pod
from ddp_infra import rendezvous_store
from ddp_infra.world import World as InfraWorld
from trainer import contract
from trainer.hang_watch import HangLimits
from trainer.pod.launch import torchrun_argv
from trainer.pod.preflight import FAIL, OK, check_infiniband
from trainer.pod.env import resolve_world
from trainer.pod.env_reader import WorldError

_FIELD_PATH = re.compile(r"metadata\.(?P<kind>labels|annotations)\['(?P<key>[^']+)'\]")
_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def kubelet_env(env: list[dict[str, Any]], pod: dict[str, Any], secrets: dict[str, dict[str, str]]) -> dict[str, str]:
    """What the container sees: the kubelet's resolution of the env list for `pod`."""
    resolved: dict[str, str] = dict(pod.get("injected", {}))
    for var in env:
        if "value" in var:
            # $(NAME) expands only to a variable defined earlier in the list; anything else stays as written.
            value = _REFERENCE.sub(lambda m: resolved.get(m[1], m[0]), var["value"])
        elif "fieldRef" in var["valueFrom"]:
            path = var["valueFrom"]["fieldRef"]["fieldPath"]
            if path in ("metadata.name", "metadata.namespace"):
                value = pod["metadata"][path.split(".")[1]]
            else:
                match = _FIELD_PATH.fullmatch(path)
                assert match, f"unexpected fieldPath {path}"
                value = pod["metadata"].get(match["kind"], {}).get(match["key"], "")  # a missing label reads as ""
        else:
            ref = var["valueFrom"]["secretKeyRef"]
            value = secrets[ref["name"]][ref["key"]]
        resolved[var["name"]] = value
    return resolved


def pod_of(world: InfraWorld, index: int, with_index_label: bool = True) -> tuple[dict[str, Any], str]:
    """A pod as Kubernetes makes it for the workload, and its hostname."""
    labels = dict(world.selector)
    if world.workload_kind in (contract.JOBSET, contract.INDEXED_JOB):
        # Job pods: a random suffix in the name, the index in an annotation and in JOB_COMPLETION_INDEX,
        # hostname <job>-<index> (the subdomain gives it its DNS name). JobSet's pods are its Job's,
        # <jobset>-<replicated job>-<job index>.
        job = world.workload_name
        if world.workload_kind == contract.JOBSET:
            job = f"{world.workload_name}-{contract.JOBSET_REPLICATED_JOB}-0"
            labels.update({"jobset.sigs.k8s.io/jobset-name": world.workload_name, "jobset.sigs.k8s.io/job-index": "0",
                           "jobset.sigs.k8s.io/replicatedjob-name": contract.JOBSET_REPLICATED_JOB})  # fmt: skip
        metadata = {
            "name": f"{job}-{index}-x7k2q",
            "namespace": world.namespace,
            "labels": labels,
            "annotations": {contract.JOB_COMPLETION_INDEX_ANNOTATION: str(index)},
        }
        return {"metadata": metadata, "injected": {contract.JOB_COMPLETION_INDEX: str(index)}}, f"{job}-{index}"
    if with_index_label:
        labels[contract.POD_INDEX_LABEL] = str(index)
    name = f"{world.workload_name}-{index}"
    return {"metadata": {"name": name, "namespace": world.namespace, "labels": labels}}, name


def configured(stack: str, **changes: Any) -> tuple[stack_config.StackConfig, InfraWorld]:
    parsed = stack_config.parse(harness.stack_config_with(stack, **changes))
    return parsed, InfraWorld.from_config(parsed, harness.PROJECT, stack)


@pytest.mark.parametrize("stack", harness.STACKS)
@pytest.mark.parametrize("kind", contract.WORKLOAD_KINDS)
@pytest.mark.parametrize("nodes", (1, 4, 64))
def test_every_pod_resolves_the_world_the_program_describes(stack, kind, nodes):
    parsed, world = configured(stack, nodes=str(nodes), workload__kind=kind)
    env = infra_pod.pod_env(world)
    for index in sorted({0, 1 % nodes, nodes - 1}):
        pod, hostname = pod_of(world, index)
        seen = resolve_world(kubelet_env(env, pod, {}), hostname)
        assert seen.node_rank == index
        assert (seen.nnodes, seen.nproc_per_node, seen.world_size) == (world.nnodes, world.nproc_per_node, world.world_size)
        assert (seen.master_addr, seen.master_port) == (world.master_addr, world.rendezvous_port)
        # the c10d store in a pod of its own: every pod waits for it, none hosts it
        assert seen.rdzv_endpoint == f"{world.rendezvous_store_name}:{world.rendezvous_port}"
        assert not seen.hosts_rendezvous
        assert (seen.rdzv_backend, seen.rdzv_id, seen.run_name) == (parsed.rendezvous.backend, world.rdzv_id, world.run_name)
        assert seen.max_restarts == parsed.rendezvous.max_restarts
        assert seen.timeouts.join == parsed.rendezvous.join_timeout_seconds
        assert seen.timeouts.read == parsed.rendezvous.read_timeout_seconds
        assert seen.master_wait_timeout == parsed.rendezvous.master_wait_timeout_seconds
        grace = parsed.workload.termination_grace_period_seconds
        assert grace - 10 <= seen.shutdown_timeout < grace
        # torchrun is started for exactly that world
        argv = torchrun_argv(seen, list(parsed.run.args))
        assert f"--nnodes={world.nnodes}" in argv and f"--nproc-per-node={world.nproc_per_node}" in argv
        assert f"--rdzv-id={world.rdzv_id}" in argv
        assert "is_host=0" in next(arg for arg in argv if arg.startswith("--rdzv-conf="))
        assert f"--shutdown-timeout={seen.shutdown_timeout}" in argv
        assert argv[-len(parsed.run.args):] == list(parsed.run.args)


@pytest.mark.parametrize("stack", harness.STACKS)
@pytest.mark.parametrize("kind", (contract.INDEXED_JOB, contract.JOBSET))
def test_an_elastic_world_reaches_every_pod_and_torchrun_as_its_range(stack, kind):
    parsed, world = configured(stack, nodes="2:5", workload__kind=kind)
    env = infra_pod.pod_env(world)
    values = {var["name"]: var.get("value") for var in env}
    nproc = world.nproc_per_node
    assert (values[contract.NNODES.name], values[contract.PET_NNODES.name]) == ("2:5", "2:5")
    assert values[contract.WORLD_SIZE.name] == f"{2 * nproc}:{5 * nproc}"
    for index in (0, 1, 4):
        pod, hostname = pod_of(world, index)
        seen = resolve_world(kubelet_env(env, pod, {}), hostname)
        assert (seen.node_rank, seen.min_nodes, seen.nnodes, seen.world_size) == (index, 2, 5, 5 * nproc)
        assert not seen.hosts_rendezvous  # any subset of the pods forms the world: none hosts the store
        argv = torchrun_argv(seen, list(parsed.run.args))
        assert "--nnodes=2:5" in argv and f"--rdzv-id={world.rdzv_id}" in argv
    # another range is another world: its pods never join this one's rendezvous
    assert configured(stack, nodes="2:4", workload__kind=kind)[1].rdzv_id != world.rdzv_id != configured(stack, nodes="5", workload__kind=kind)[1].rdzv_id


def test_an_elastic_world_whose_store_is_on_pod_0_is_refused_by_the_pod_too():
    """The program refuses this config; a pod made by hand gets the same answer from the entrypoint."""
    _, world = configured("dev", nodes="3", workload__kind=contract.INDEXED_JOB, rendezvous__store="pod-0")
    env = {var["name"]: var for var in infra_pod.pod_env(world)}
    for name, value in ((contract.NNODES.name, "2:3"), (contract.PET_NNODES.name, "2:3"), (contract.WORLD_SIZE.name, "2:3")):
        env[name] = {"name": name, "value": value}
    pod, hostname = pod_of(world, 1)
    with pytest.raises(WorldError) as refused:
        resolve_world(kubelet_env(list(env.values()), pod, {}), hostname)
    (problem,) = refused.value.problems
    assert problem.name == contract.RDZV_ENDPOINT.name and "a c10d store apart from pod 0" in problem.allowed


@pytest.mark.parametrize("stack", harness.STACKS)
@pytest.mark.parametrize("kind", (contract.INDEXED_JOB, contract.JOBSET))
def test_spare_pods_reach_every_pod_which_joins_the_same_world_of_nodes(stack, kind):
    parsed, world = configured(stack, nodes="4", workload__kind=kind, workload__sparePods="2")
    env = infra_pod.pod_env(world)
    values = {var["name"]: var.get("value") for var in env}
    assert (values[contract.NNODES.name], values[contract.SPARE_PODS.name]) == ("4", "2")
    for index in (0, 3, 4, 5):  # the spares' indexes follow the world's
        pod, hostname = pod_of(world, index)
        seen = resolve_world(kubelet_env(env, pod, {}), hostname)
        assert (seen.node_rank, seen.nnodes, seen.spare_pods, seen.min_nodes) == (index, 4, 2, None)
        assert not seen.hosts_rendezvous
        argv = torchrun_argv(seen, list(parsed.run.args))
        assert "--nnodes=4" in argv and f"--rdzv-id={world.rdzv_id}" in argv
    # spares do not change the world: its rendezvous is the one it has without them
    assert configured(stack, nodes="4", workload__kind=kind)[1].rdzv_id == world.rdzv_id
    pod, hostname = pod_of(world, 6)
    with pytest.raises(WorldError, match=r"a node rank below NNODES \+ SPARE_PODS = 6"):
        resolve_world(kubelet_env(env, pod, {}), hostname)
    assert contract.SPARE_PODS.name not in {var["name"] for var in infra_pod.pod_env(configured(stack, nodes="4", workload__kind=kind)[1])}


def test_spare_pods_whose_store_is_on_pod_0_are_refused_by_the_pod_too():
    _, world = configured("dev", nodes="3", workload__kind=contract.INDEXED_JOB, rendezvous__store="pod-0")
    env = [*infra_pod.pod_env(world), {"name": contract.SPARE_PODS.name, "value": "1"}]
    pod, hostname = pod_of(world, 3)
    with pytest.raises(WorldError) as refused:
        resolve_world(kubelet_env(env, pod, {}), hostname)
    (problem,) = refused.value.problems
    assert problem.name == contract.RDZV_ENDPOINT.name and "with SPARE_PODS set, a c10d store apart from pod 0" in problem.allowed


@pytest.mark.parametrize("kind", contract.WORKLOAD_KINDS)
def test_with_the_store_on_pod_0_pod_0_hosts_it_and_the_others_wait_for_pod_0(kind):
    _, world = configured("dev", nodes="3", workload__kind=kind, rendezvous__store="pod-0")
    env = infra_pod.pod_env(world)
    for index in range(3):
        pod, hostname = pod_of(world, index)
        seen = resolve_world(kubelet_env(env, pod, {}), hostname)
        assert seen.rdzv_endpoint == f"{world.master_addr}:{world.rendezvous_port}"
        assert seen.hosts_rendezvous is (index == 0)
        conf = next(arg for arg in torchrun_argv(seen, []) if arg.startswith("--rdzv-conf="))
        assert f"is_host={int(index == 0)}" in conf


@pytest.mark.parametrize(
    ("rendezvous", "on_pod_0"),
    [({}, False), ({"store": "pod-0"}, True), ({"backend": "static"}, True),
     ({"backend": "etcd-v2", "endpoint": "etcd.ml.svc:2379"}, False)],
)  # fmt: skip
def test_both_sides_place_the_store_by_the_contracts_rule(rendezvous, on_pod_0):
    parsed, world = configured("dev", nodes="2", **{f"rendezvous__{key}": value for key, value in rendezvous.items()})
    pod, hostname = pod_of(world, 0)
    seen = resolve_world(kubelet_env(infra_pod.pod_env(world), pod, {}), hostname)
    assert parsed.rendezvous.store_on_pod_0 is seen.hosts_rendezvous is on_pod_0
    assert (world.rdzv_endpoint == f"{world.master_addr}:{world.rendezvous_port}") is on_pod_0


def test_the_store_pod_runs_the_trainers_store_where_the_pods_look_for_it():
    _, world = configured("dev")
    (container,) = rendezvous_store.deployment_manifest(world)["spec"]["template"]["spec"]["containers"]
    service = rendezvous_store.service_manifest(world)
    (port,) = service["spec"]["ports"]
    endpoint = next(var["value"] for var in infra_pod.pod_env(world) if var["name"] == contract.RDZV_ENDPOINT.name)
    assert container["command"] == [*contract.RENDEZVOUS_STORE_COMMAND, str(port["targetPort"])]
    assert endpoint == f"{service['metadata']['name']}:{port['port']}"


@pytest.mark.parametrize("kind", contract.WORKLOAD_KINDS)
def test_master_addr_is_pod_0s_hostname_under_the_service(kind):
    """The name every pod waits for is the one pod 0 gets: its hostname, and the Service as its subdomain."""
    parsed, world = configured("dev", nodes="4", workload__kind=kind)
    env = kubelet_env(infra_pod.pod_env(world), pod_of(world, 2)[0], {})
    _, pod0_hostname = pod_of(world, 0)
    subdomain = infra_pod.pod_template(world)["spec"].get("subdomain", world.service_name)
    assert env[contract.MASTER_ADDR.name] == f"{pod0_hostname}.{subdomain}"


def test_a_jobset_pod_without_its_index_falls_back_to_its_hostname():
    parsed, world = configured("dev", nodes="4", workload__kind=contract.JOBSET)
    pod, hostname = pod_of(world, 3)
    env = kubelet_env(infra_pod.pod_env(world), {**pod, "injected": {}}, {})
    env[contract.NODE_RANK.name] = env[contract.PET_NODE_RANK.name] = ""
    seen = resolve_world(env, hostname)
    assert seen.node_rank == 3 and "hostname" in seen.rank_source


def test_a_cluster_without_the_pod_index_label_falls_back_to_the_pod_name():
    parsed, world = configured("dev", nodes="4", workload__kind=contract.STATEFULSET)
    env = kubelet_env(infra_pod.pod_env(world), *pod_of(world, 3, with_index_label=False)[:1], {})
    assert env[contract.NODE_RANK.name] == env[contract.PET_NODE_RANK.name] == ""
    seen = resolve_world(env, f"{world.workload_name}-3")
    assert seen.node_rank == 3 and contract.POD_NAME.name in seen.rank_source


def test_the_token_reaches_the_pod_under_both_names():
    parsed, world = configured("prod")
    world = InfraWorld(**{**world.__dict__, "has_hf_token": True})
    secrets = {world.hf_token_secret_name: {"token": "hf_contract_test"}}
    pod, _ = pod_of(world, 0)
    env = kubelet_env(infra_pod.pod_env(world), pod, secrets)
    assert env[contract.HF_TOKEN.name] == env[contract.HUGGINGFACE_HUB_TOKEN.name] == "hf_contract_test"


@pytest.mark.parametrize("name", contract.REQUIRED)
def test_each_required_variable_is_set_by_the_program_and_enforced_by_the_trainer(name):
    parsed, world = configured("prod")
    pod, hostname = pod_of(world, 1)
    env = kubelet_env(infra_pod.pod_env(world), pod, {})
    assert env.get(name), f"the program does not set {name}"
    del env[name]
    with pytest.raises(WorldError) as raised:
        resolve_world(env, hostname)
    assert name in {problem.name for problem in raised.value.problems}


def test_every_mirror_agrees_after_the_kubelet_expands_it():
    parsed, world = configured("prod", nodes="64")
    pod, _ = pod_of(world, 63)
    env = kubelet_env(infra_pod.pod_env(world), pod, {})
    for mirror, original in contract.PET_MIRRORS.items():
        assert env[mirror] == env[original], mirror
    assert env[contract.PET_NODE_RANK.name] == "63"


@pytest.mark.parametrize("grace, shutdown", [(0, 0), (8, 6), (30, 23), (120, 110), (600, 590)])
def test_workers_get_the_grace_period_less_a_margin_to_checkpoint(grace, shutdown):
    """torchrun's 30 s default would cut a long checkpoint short whatever the grace period says."""
    parsed, world = configured("dev", workload__terminationGracePeriodSeconds=str(grace))
    pod, hostname = pod_of(world, 0)
    seen = resolve_world(kubelet_env(infra_pod.pod_env(world), pod, {}), hostname)
    assert seen.shutdown_timeout == shutdown
    assert f"--shutdown-timeout={shutdown}" in torchrun_argv(seen, list(parsed.run.args))


@pytest.mark.parametrize("stack", harness.STACKS)
@pytest.mark.parametrize("floor, ceiling", [(None, None), ("45", "900"), ("5", "0"), ("60", "60")])
def test_the_configured_hang_timeout_reaches_every_pod(stack, floor, ceiling):
    """workload.hangTimeout is what each pod's HANG_TIMEOUT_FLOOR and HANG_TIMEOUT_CEILING read
    (unset: the model's defaults, the trainer's own; ceiling 0 turns hang detection off)."""
    changes = {} if floor is None else {"workload__hangTimeout": {"floorSeconds": floor, "ceilingSeconds": ceiling}}
    parsed, world = configured(stack, nodes="4", **changes)
    expected = (floor or "30", ceiling or "120")
    assert (str(parsed.workload.hang_timeout.floor_seconds), str(parsed.workload.hang_timeout.ceiling_seconds)) == expected
    env = infra_pod.pod_env(world)
    for index in (0, 3):
        pod, hostname = pod_of(world, index)
        seen = kubelet_env(env, pod, {})
        assert (seen[contract.HANG_TIMEOUT_FLOOR.name], seen[contract.HANG_TIMEOUT_CEILING.name]) == expected
        assert resolve_world(seen, hostname).node_rank == index  # the entrypoint accepts them
        assert HangLimits.from_env(seen) == HangLimits(float(expected[0]), float(expected[1]))  # the training processes read them


@pytest.mark.parametrize("stack, asked", [("prod", True), ("dev", False)])
def test_infiniband_asked_for_by_the_program_is_checked_by_the_trainers_preflight(stack, asked, tmp_path):
    parsed, world = configured(stack, **({"network__ibGidIndex": "3"} if asked else {}))
    pod, _ = pod_of(world, 1)
    env = kubelet_env(infra_pod.pod_env(world), pod, {})
    missing = check_infiniband(env, str(tmp_path / "infiniband"))
    assert (missing.status == FAIL) == asked, missing
    if asked:
        assert (env[contract.NCCL_IB_HCA.name], env[contract.NCCL_IB_GID_INDEX.name]) == (parsed.network.ib_hca, "3")
        (tmp_path / "infiniband").mkdir()
        (tmp_path / "infiniband" / "uverbs0").touch()
        present = check_infiniband(env, str(tmp_path / "infiniband"))
        assert present.status == OK and parsed.network.ib_hca in present.detail
    else:
        assert contract.NCCL_IB_HCA.name not in env and contract.NCCL_IB_GID_INDEX.name not in env


# Each optional part of the pod env, as the stack config switches it on.
_OPTIONAL_ENV = {
    "the HF token": ({}, {"has_hf_token": True}),
    "the models volume": ({"storage__models__size": "10Gi"}, {}),
    "a socket interface": ({"network__socketIfname": "eth0"}, {}),
}


@pytest.mark.parametrize("optional", sorted(_OPTIONAL_ENV))
@pytest.mark.parametrize("stack", harness.STACKS)
def test_an_optional_variable_shifts_no_other_entry_of_the_env(stack, optional):
    """The provider diffs the env list by index: an entry that moves shows as a change of every
    later entry in a preview, so switching an optional variable on must only append entries."""
    changes, world_changes = _OPTIONAL_ENV[optional]
    none = {"storage__models": harness.DELETE, "network__socketIfname": harness.DELETE}
    _, without_world = configured(stack, **none)
    _, with_world = configured(stack, **{**none, **changes})
    without_world = InfraWorld(**{**without_world.__dict__, "has_hf_token": False})
    with_world = InfraWorld(**{**with_world.__dict__, "has_hf_token": False, **world_changes})
    before = infra_pod.pod_env(without_world)
    after = infra_pod.pod_env(with_world)
    assert len(after) > len(before), f"{optional} adds no env entry"
    moved = [(i, entry["name"], after[i]["name"]) for i, entry in enumerate(before) if after[i] != entry]
    assert not moved, f"{optional} moves these entries (index, was, now): {moved}"


@pytest.mark.parametrize("attempts", [None, "5", "9"])
def test_the_heartbeats_a_pod_may_miss_reach_torchrun_whether_or_not_the_stack_sets_them(attempts):
    """Left at its default, the stack writes no variable and the trainer's default is the stack's."""
    settings = {} if attempts is None else {"rendezvous__keepAliveMaxAttempts": attempts}
    parsed, world = configured("dev", nodes="2", **settings)
    env = infra_pod.pod_env(world)
    pod, hostname = pod_of(world, 1)
    seen = resolve_world(kubelet_env(env, pod, {}), hostname)
    conf = next(arg for arg in torchrun_argv(seen, list(parsed.run.args)) if arg.startswith("--rdzv-conf="))
    assert f"keep_alive_max_attempt={attempts or contract.KEEP_ALIVE_MAX_ATTEMPTS}," in conf
    assert parsed.rendezvous.keep_alive_max_attempts == int(attempts or contract.KEEP_ALIVE_MAX_ATTEMPTS)
