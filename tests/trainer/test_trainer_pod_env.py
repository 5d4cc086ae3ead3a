"""resolve_world: the pod env of both workloads and seed 000's scheme, and every malformed input."""

from __future__ import annotations

import pytest
from trainer_testing import pod_env

from trainer import contract as c
from trainer.entrypoint import PodWorld, WorldError, resolve_world

pytestmark = pytest.mark.timeout(30)


def problems_of(env: dict[str, str], hostname: str = "node") -> dict[str, str]:
    with pytest.raises(WorldError) as caught:
        resolve_world(env, hostname)
    return {p.name: str(p) for p in caught.value.problems}


def test_statefulset_pod_gets_its_rank_from_the_pod_index_label():
    env = pod_env("train-llm-3", 29500, nnodes=4, nproc=8, node_rank="3")
    world = resolve_world(env, hostname="train-llm-3")
    assert (world.node_rank, world.nnodes, world.nproc_per_node, world.world_size) == (3, 4, 8, 32)
    assert world.rank_source == c.NODE_RANK.name
    assert world.rdzv_endpoint == "127.0.0.1:29500"
    assert world.summary().startswith("[DDP] pod_index=3 nnodes=4 nproc_per_node=8 world_size=32 master=127.0.0.1:29500")


def test_an_elastic_pod_reads_its_range_and_says_what_its_world_does_with_it():
    env = pod_env("train-llm-2", 29500, kind=c.INDEXED_JOB, nproc=4, **{
        c.NNODES.name: "2:5", c.PET_NNODES.name: "2:5", c.WORLD_SIZE.name: "8:20", c.JOB_COMPLETION_INDEX: "2",
        c.RDZV_ENDPOINT.name: "store:29500", c.PET_RDZV_ENDPOINT.name: "store:29500",
    })  # fmt: skip
    world = resolve_world(env, hostname="train-llm-2")
    assert (world.node_rank, world.min_nodes, world.nnodes, world.world_size, world.nnodes_text) == (2, 2, 5, 20, "2:5")
    assert " nnodes=2:5 nproc_per_node=4 world_size=8:20 " in world.summary()
    assert "trains once 2 have joined, takes in up to 5" in world.elastic_rule()
    assert "waits up to 60 s (RDZV_JOIN_TIMEOUT)" in world.elastic_rule()
    assert resolve_world(pod_env("train-llm-1", 29500), hostname="x").elastic_rule() is None
    # WORLD_SIZE a range too, and the one the range makes
    problems = problems_of({**env, c.WORLD_SIZE.name: "20"})
    assert "NNODES x NPROC_PER_NODE = 2:5 x 4 = 8:20" in problems[c.WORLD_SIZE.name]


def test_statefulset_without_the_label_uses_the_pod_name_ordinal():
    world = resolve_world(pod_env("train-llm-2", 29500, nnodes=3), hostname="unrelated")
    assert world.node_rank == 2
    assert world.rank_source == "POD_NAME train-llm-2"


def test_falls_back_to_the_hostname_ordinal():
    env = pod_env("train-llm-1", 29500, **{c.POD_NAME.name: "no-ordinal-here"})
    world = resolve_world(env, hostname="train-llm-1")
    assert (world.node_rank, world.rank_source) == (1, "hostname train-llm-1")


def test_indexed_job_pod_uses_the_completion_index_not_its_random_name_suffix():
    env = pod_env("train-job-1-x7k2p", 29500, kind=c.INDEXED_JOB, **{c.JOB_COMPLETION_INDEX: "1"})
    world = resolve_world(env, hostname="train-job-1")
    assert (world.node_rank, world.rank_source) == (1, c.JOB_COMPLETION_INDEX)


def test_indexed_job_without_the_index_variable_uses_the_hostname():
    env = pod_env("train-job-0-abcde", 29500, kind=c.INDEXED_JOB)
    assert resolve_world(env, hostname="train-job-0").node_rank == 0


def test_jobset_pod_uses_its_jobs_completion_index():
    env = pod_env("train-node-0-1-x7k2p", 29500, kind=c.JOBSET, **{c.JOB_COMPLETION_INDEX: "1"})
    world = resolve_world(env, hostname="train-node-0-1")
    assert (world.node_rank, world.rank_source) == (1, c.JOB_COMPLETION_INDEX)


def test_jobset_pod_without_the_index_variable_uses_the_hostnames_last_number():
    """<jobset>-<replicated job>-<job index>-<pod index>: the job index is not the pod's."""
    env = pod_env("train-node-0-3-abcde", 29500, nnodes=4, kind=c.JOBSET)
    world = resolve_world(env, hostname="train-node-0-3")
    assert (world.node_rank, world.rank_source) == (3, "hostname train-node-0-3")


def test_jobset_pod_0s_name_is_its_jobs_pod_0():
    assert c.master_dns_name("train", "train-rdzv", c.JOBSET) == "train-node-0-0.train-rdzv"
    assert c.master_dns_name("train", "train-rdzv", c.INDEXED_JOB) == "train-0.train-rdzv"


def test_timeouts_restarts_and_backends_come_from_the_env():
    env = pod_env("w-0", 29500, backend="static", **{
        c.RDZV_JOIN_TIMEOUT.name: "900", c.RDZV_READ_TIMEOUT.name: "300", c.RDZV_LAST_CALL_TIMEOUT.name: "45",
        c.RDZV_CLOSE_TIMEOUT.name: "50", c.RDZV_KEEP_ALIVE_INTERVAL.name: "3", c.RDZV_KEEP_ALIVE_MAX_ATTEMPTS.name: "4", c.MAX_RESTARTS.name: "7", c.PET_MAX_RESTARTS.name: "7",
        c.MASTER_WAIT_TIMEOUT.name: "12.5",
    })  # fmt: skip
    world = resolve_world(env, "w-0")
    t = world.timeouts
    assert (t.join, t.read, t.last_call, t.close, t.keep_alive, t.keep_alive_max_attempts) == (900, 300, 45, 50, 3, 4)
    assert (world.max_restarts, world.master_wait_timeout, world.rdzv_backend) == (7, 12.5, "static")


def test_etcd_uses_its_own_endpoint():
    env = pod_env("w-1", 29500, backend="etcd-v2", **{c.RDZV_ENDPOINT.name: "etcd.ml.svc:2379",
                                                       c.PET_RDZV_ENDPOINT.name: "etcd.ml.svc:2379"})  # fmt: skip
    world = resolve_world(env, "w-1")
    assert world.rdzv_endpoint == "etcd.ml.svc:2379"
    assert not world.hosts_rendezvous


def test_only_node_zero_of_c10d_and_static_hosts_the_rendezvous():
    assert resolve_world(pod_env("w-0", 1), "w-0").hosts_rendezvous
    assert resolve_world(pod_env("w-0", 1, backend="static"), "w-0").hosts_rendezvous
    assert not resolve_world(pod_env("w-1", 1), "w-1").hosts_rendezvous
    assert not resolve_world(pod_env("w-1", 1, backend="static"), "w-1").hosts_rendezvous


def endpoint_env(pod: str, endpoint: str, backend: str = "c10d") -> dict[str, str]:
    return pod_env(pod, 29500, backend=backend, **{c.RDZV_ENDPOINT.name: endpoint, c.PET_RDZV_ENDPOINT.name: endpoint})


@pytest.mark.parametrize("endpoint", ["rdzv-store.ml.svc:29400", "127.0.0.1:29400", "rdzv-store.ml.svc:29500"])
def test_no_node_hosts_a_c10d_store_that_runs_apart(endpoint):
    """An endpoint other than MASTER_ADDR:MASTER_PORT is a store of its own: node 0 waits for it too."""
    for pod in ("w-0", "w-1"):
        world = resolve_world(endpoint_env(pod, endpoint), pod)
        assert world.rdzv_endpoint == endpoint and not world.hosts_rendezvous, pod


def test_node_zero_hosts_a_c10d_store_whose_endpoint_is_written_out_as_its_own_address():
    assert resolve_world(endpoint_env("w-0", "127.0.0.1:29500"), "w-0").hosts_rendezvous
    assert not resolve_world(endpoint_env("w-1", "127.0.0.1:29500"), "w-1").hosts_rendezvous


def test_static_is_hosted_on_node_zero_whatever_the_endpoint_says():
    """torchrun's static backend keeps its store at MASTER_ADDR:MASTER_PORT, on node 0's agent."""
    assert resolve_world(endpoint_env("w-0", "rdzv-store.ml.svc:29400", backend="static"), "w-0").hosts_rendezvous


@pytest.mark.parametrize("pod", ["w-0", "w-1"])
def test_no_node_hosts_an_etcd_rendezvous(pod):
    assert not resolve_world(endpoint_env(pod, "etcd.ml.svc:2379", backend="etcd-v2"), pod).hosts_rendezvous
    assert not resolve_world(endpoint_env(pod, "127.0.0.1:29500", backend="etcd-v2"), pod).hosts_rendezvous


def test_world_is_frozen():
    world = resolve_world(pod_env("w-0", 1), "w-0")
    assert isinstance(world, PodWorld)
    with pytest.raises(AttributeError):
        world.node_rank = 1


@pytest.mark.parametrize("name", c.REQUIRED)
def test_every_required_variable_is_required(name):
    env = pod_env("w-1", 29500)
    del env[name]
    problems = problems_of(env)
    assert name in problems
    assert "not set" in problems[name]


@pytest.mark.parametrize(
    "name, value, expected",
    [
        (c.NNODES.name, "two", "whole number >= 1"),
        (c.NNODES.name, "0", "whole number >= 1"),
        (c.NPROC_PER_NODE.name, "-1", "whole number >= 1"),
        (c.NPROC_PER_NODE.name, "auto", "whole number >= 1"),
        (c.NNODES.name, "3:2", "MIN:MAX with 1 <= MIN < MAX"),
        (c.NNODES.name, "2:2", "MIN:MAX with 1 <= MIN < MAX"),
        (c.NNODES.name, "0:2", "MIN:MAX with 1 <= MIN < MAX"),
        (c.NNODES.name, "1:2:3", "MIN:MAX with 1 <= MIN < MAX"),
        (c.WORLD_SIZE.name, "2.0", "NNODES x NPROC_PER_NODE"),
        (c.MASTER_PORT.name, "70000", "1..65535"),
        (c.MASTER_PORT.name, "http", "whole number"),
        (c.MASTER_ADDR.name, "not a host!", "DNS name"),
        (c.MASTER_ADDR.name, "under_score.svc", "DNS name"),
        (c.RDZV_BACKEND.name, "etcd", "c10d, static, etcd-v2"),
        (c.RDZV_ID.name, "has space", "letters, digits"),
        (c.RDZV_JOIN_TIMEOUT.name, "soon", "whole number >= 1"),
        (c.RDZV_READ_TIMEOUT.name, "0", "whole number >= 1"),
        (c.RDZV_LAST_CALL_TIMEOUT.name, "x", "whole number"),
        (c.RDZV_CLOSE_TIMEOUT.name, "-5", "whole number"),
        (c.RDZV_KEEP_ALIVE_INTERVAL.name, "0", "whole number >= 1"),
        (c.RDZV_KEEP_ALIVE_MAX_ATTEMPTS.name, "1", "whole number >= 2"),
        (c.MAX_RESTARTS.name, "-1", "whole number >= 0"),
        (c.MASTER_WAIT_TIMEOUT.name, "forever", "positive number of seconds"),
        (c.MASTER_WAIT_TIMEOUT.name, "0", "positive number of seconds"),
        (c.WORKLOAD_KIND.name, "deployment", "statefulset, job"),
        (c.NODE_RANK.name, "first", "whole number >= 0"),
        (c.RDZV_ENDPOINT.name, "no-port", "host:port"),
        (c.HANG_TIMEOUT_FLOOR.name, "0", "whole number >= 1"),
        (c.HANG_TIMEOUT_CEILING.name, "2m", "whole number >= 0"),
    ],
)
def test_malformed_values_are_named_with_what_is_allowed(name, value, expected):
    env = pod_env("w-1", 29500, **{name: value})
    for mirror, original in c.PET_MIRRORS.items():  # keep the mirrors in step, to test one thing
        env[mirror] = env[original]
    problems = problems_of(env)
    assert name in problems
    assert repr(value) in problems[name] and expected in problems[name]


def test_world_size_must_be_nnodes_times_nproc():
    problems = problems_of(pod_env("w-1", 29500, nnodes=2, nproc=4, **{c.WORLD_SIZE.name: "2"}))
    assert "NNODES x NPROC_PER_NODE = 2 x 4 = 8" in problems[c.WORLD_SIZE.name]


def test_node_rank_must_be_below_nnodes():
    problems = problems_of(pod_env("w-1", 29500, node_rank="2", **{c.PET_NODE_RANK.name: "2"}))
    assert "below NNODES=2" in problems[c.NODE_RANK.name]
    problems = problems_of(pod_env("w-5", 29500))
    assert "below NNODES=2" in problems["POD_NAME w-5"]


def test_node_rank_must_agree_with_the_completion_index():
    env = pod_env("j-1-abc", 29500, kind=c.INDEXED_JOB, node_rank="0", **{c.JOB_COMPLETION_INDEX: "1"})
    env[c.PET_NODE_RANK.name] = "0"
    assert "JOB_COMPLETION_INDEX=1" in problems_of(env)[c.NODE_RANK.name]


def test_no_rank_source_at_all_says_where_a_rank_can_come_from():
    problems = problems_of(pod_env("nonumber", 29500), hostname="also-nonumber")
    assert c.POD_INDEX_LABEL in problems[c.NODE_RANK.name]


@pytest.mark.parametrize("mirror", sorted(set(c.PET_MIRRORS) - {c.PET_NODE_RANK.name}))
def test_a_stale_torchrun_mirror_is_refused(mirror):
    env = pod_env("w-1", 29500)
    env[mirror] = env[mirror] + "9"
    assert f"same value as {c.PET_MIRRORS[mirror]}" in problems_of(env)[mirror]


def test_pet_node_rank_must_mirror_node_rank_and_pet_endpoint_the_endpoint():
    env = pod_env("w-1", 29500, node_rank="1", **{c.PET_NODE_RANK.name: "0", c.PET_RDZV_ENDPOINT.name: "elsewhere:1"})
    problems = problems_of(env)
    assert "same value as NODE_RANK" in problems[c.PET_NODE_RANK.name]
    assert "127.0.0.1:29500" in problems[c.PET_RDZV_ENDPOINT.name]


def test_one_error_lists_every_problem():
    env = pod_env("w-1", 29500, **{c.NNODES.name: "x", c.MASTER_PORT.name: "0", c.RDZV_BACKEND.name: "zk"})
    del env[c.RUN_NAME.name]
    with pytest.raises(WorldError) as caught:
        resolve_world(env, "w-1")
    message = str(caught.value)
    for name in (c.NNODES.name, c.MASTER_PORT.name, c.RDZV_BACKEND.name, c.RUN_NAME.name):
        assert f"  - {name}:" in message


def test_a_pod_env_built_from_the_contract_alone_resolves():
    """The other side of the contract: a Pulumi-made env (every REQUIRED name, nothing else) works."""
    env = pod_env("w-0", 29500)
    assert set(c.REQUIRED) <= set(env) <= {v.name for v in c.ALL}
    assert resolve_world(env, "w-0").world_size == 2


# --- seed 000's injected variables -----------------------------------------------------------
def test_seed000_statefulset_scheme():
    env = {"POD_NAME": "train-2", "SVC_NAME": "svc", "POD_NUMS": "4", "POD_PORT": "23456", "POD_NAMESPACE": "team"}
    world = resolve_world(env, hostname="whatever")
    assert world.scheme == "seed-000"
    assert (world.node_rank, world.nnodes, world.nproc_per_node, world.world_size) == (2, 4, 1, 4)
    assert world.master_addr == "train-0.svc"
    assert (world.master_port, world.rdzv_backend, world.rdzv_id) == (23456, "c10d", "team-train")


def test_seed000_job_scheme_uses_job_name_and_completion_index():
    env = {"POD_NAME": "myjob-0-E5F86S4", "JOB_NAME": "my-job", "POD_NUMS": "3", "JOB_COMPLETION_INDEX": "1",
           "POD_PORT": "23456", "POD_NAMESPACE": "ns", "SVC_NAME": "s", c.NPROC_PER_NODE.name: "8"}  # fmt: skip
    world = resolve_world(env, hostname="x")
    assert (world.node_rank, world.world_size) == (1, 24)
    assert world.master_addr == "my-job-0.s"


def test_seed000_malformed_inputs_are_all_reported():
    env = {"POD_NAME": "noordinal", "POD_NUMS": "zero", "POD_PORT": "99999", "POD_NAMESPACE": "ns"}
    assert {"POD_NUMS", "POD_PORT", "SVC_NAME", "POD_NAME"} <= set(problems_of(env))


def test_seed000_rank_beyond_pod_count():
    env = {"POD_NAME": "w-4", "POD_NUMS": "2", "POD_PORT": "1234", "POD_NAMESPACE": "ns", "SVC_NAME": "s"}
    assert "below POD_NUMS=2" in problems_of(env)["POD_NAME w-4"]
