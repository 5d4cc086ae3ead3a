"""torchrun_argv: the world's flags first, the user's arguments after them verbatim."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from trainer_testing import REPO, SMOKE_ARGS, pod_env, store_apart

from trainer import contract as c
from trainer.entrypoint import resolve_world, torchrun_argv
from trainer.pod.launch import AWAIT_START, WORKER_SCRIPT, ArgsError, held_back, torchrun_env, worker_preload

pytestmark = pytest.mark.timeout(30)


def world(pod: str = "w-1", backend: str = "c10d", **extra: str):
    return resolve_world(pod_env(pod, 29500, nnodes=2, nproc=4, backend=backend, **extra), pod)


def flags(argv: list[str]) -> dict[str, str]:
    return dict(arg[2:].split("=", 1) for arg in argv if arg.startswith("--") and "=" in arg)


def test_c10d_argv_carries_the_world_and_user_args_verbatim():
    argv = torchrun_argv(world(), SMOKE_ARGS, python="python")
    assert argv[:3] == ["python", "-m", "trainer.pod.agent"]
    assert argv[-len(SMOKE_ARGS) - 2 :] == ["--run-path", str(WORKER_SCRIPT), *SMOKE_ARGS]
    head = flags(argv[: -len(SMOKE_ARGS)])
    assert head == {
        "nnodes": "2", "nproc-per-node": "4", "rdzv-backend": "c10d", "rdzv-endpoint": "127.0.0.1:29500",
        "rdzv-id": "test-run", "max-restarts": "0", "shutdown-timeout": "30", "start-method": "forkserver",
        "rdzv-conf": "join_timeout=60,last_call_timeout=30,close_timeout=30,keep_alive_interval=1,keep_alive_max_attempt=5,read_timeout=60,is_host=0",
    }  # fmt: skip


def test_node_zero_hosts_the_c10d_store():
    assert "is_host=1" in flags(torchrun_argv(world("w-0"), ["x.py"]))["rdzv-conf"]


def test_node_zero_hosts_the_c10d_store_when_the_endpoint_is_set_to_its_own_address():
    w = world("w-0", **store_apart("127.0.0.1:29500"))  # MASTER_ADDR:MASTER_PORT, written out
    assert flags(torchrun_argv(w, ["x.py"]))["rdzv-conf"].endswith(",is_host=1")


@pytest.mark.parametrize("endpoint", ["rdzv-store:29400", "127.0.0.1:29400", "rdzv-store:29500"])
def test_no_node_hosts_a_c10d_store_that_runs_apart(endpoint):
    """Another host, or node 0's host on another port: each agent, node 0's too, is only a client."""
    for pod in ("w-0", "w-1"):
        head = flags(torchrun_argv(world(pod, **store_apart(endpoint)), ["x.py"]))
        assert head["rdzv-endpoint"] == endpoint
        assert head["rdzv-conf"].endswith(",is_host=0"), (pod, head["rdzv-conf"])


def test_static_passes_node_rank_master_and_its_timeout():
    head = flags(torchrun_argv(world("w-1", backend="static"), ["train.py"]))
    assert head["node-rank"] == "1"
    assert (head["master-addr"], head["master-port"]) == ("127.0.0.1", "29500")
    assert head["rdzv-conf"] == "timeout=60"


def test_etcd_gets_its_endpoint_and_no_c10d_only_settings():
    w = world("w-1", backend="etcd-v2", **{c.RDZV_ENDPOINT.name: "etcd:2379", c.PET_RDZV_ENDPOINT.name: "etcd:2379"})
    head = flags(torchrun_argv(w, ["train.py"]))
    assert head["rdzv-endpoint"] == "etcd:2379"
    assert "is_host" not in head["rdzv-conf"] and "read_timeout" not in head["rdzv-conf"]


def test_a_lost_pod_counts_as_gone_after_the_configured_missed_heartbeats_of_the_configured_interval():
    """torchrun's own 5 s x 3 keeps a lost pod in the rendezvous for 15 s, and its replacement out;
    its 3 drops live pods on a busy node: 5 unless the env says."""
    assert "keep_alive_interval=1,keep_alive_max_attempt=5," in flags(torchrun_argv(world(), ["train.py"]))["rdzv-conf"]
    head = flags(torchrun_argv(world(**{c.RDZV_KEEP_ALIVE_INTERVAL.name: "4", c.RDZV_KEEP_ALIVE_MAX_ATTEMPTS.name: "8"}), ["train.py"]))
    assert "keep_alive_interval=4,keep_alive_max_attempt=8," in head["rdzv-conf"]
    etcd = world(backend="etcd-v2", **{c.RDZV_ENDPOINT.name: "etcd:2379", c.PET_RDZV_ENDPOINT.name: "etcd:2379"})
    assert "keep_alive_interval=1,keep_alive_max_attempt=5" in flags(torchrun_argv(etcd, ["train.py"]))["rdzv-conf"]


def test_timeouts_and_restarts_reach_torchrun():
    w = world(**{c.RDZV_JOIN_TIMEOUT.name: "1800", c.RDZV_READ_TIMEOUT.name: "240", c.MAX_RESTARTS.name: "5",
                 c.PET_MAX_RESTARTS.name: "5"})  # fmt: skip
    head = flags(torchrun_argv(w, ["train.py"]))
    assert "join_timeout=1800" in head["rdzv-conf"] and "read_timeout=240" in head["rdzv-conf"]
    assert head["max-restarts"] == "5"


def test_script_flags_that_look_like_torchrun_flags_are_the_scripts():
    user = ["train.py", "--nnodes", "9", "--master-port=1"]
    assert torchrun_argv(world(), user)[-4:] == user


@pytest.mark.parametrize(
    "user",
    [
        ["--nnodes=4", "train.py"],
        ["--nproc_per_node", "8", "train.py"],
        ["--log-dir", "/tmp/x", "--rdzv-id=other", "-m", "trainer.train"],
        ["--standalone", "train.py"],
    ],
)
def test_user_torchrun_flags_that_would_contradict_the_pod_env_are_refused(user):
    with pytest.raises(ArgsError, match="pod env"):
        torchrun_argv(world(), user)


def test_harmless_torchrun_flags_pass_before_the_worker_and_the_script_after_it():
    user = ["--log-dir", "/tmp/logs", "--tee", "3", "--start-method=spawn", "-m", "trainer.train", "smoke"]
    argv = torchrun_argv(world(), user)
    assert argv[-10:] == ["--log-dir", "/tmp/logs", "--tee", "3", "--start-method=spawn", "--run-path", str(WORKER_SCRIPT),
                          "-m", "trainer.train", "smoke"]  # fmt: skip
    assert argv.index("--start-method=forkserver") < argv.index("--start-method=spawn")  # the user's, later, wins


@pytest.mark.parametrize("user", [["--no-python", "./train.sh", "-x"], ["--no_python", "bin/train"], ["--run-path", "/abs/t.py"]])
def test_a_command_that_is_not_python_or_already_runs_in_the_agent_passes_verbatim(user):
    argv = torchrun_argv(world(), user)
    assert argv[-len(user) :] == user and "--run-path" not in argv[: -len(user)]


def preload(user: list[str]) -> list[str]:
    return worker_preload(torchrun_argv(world(), user)[3:])  # what the agent gets: after python -m <agent>


OWN_PRELOAD = ["torch", "torch._dynamo", "trainer.train", "torch.utils.tensorboard"]


def test_workers_are_forked_with_torch_and_only_the_products_own_module_imported():
    """A user's module may touch the GPU when imported: a process that did cannot fork workers that use it."""
    assert preload(SMOKE_ARGS) == OWN_PRELOAD
    assert preload(["-m", "mylab.train", "--lr", "1"]) == ["torch", "torch._dynamo"]
    assert preload(["/abs/train.py"]) == ["torch", "torch._dynamo"]
    assert preload(["--no-python", "./train.sh"]) == []
    assert preload(["--start-method", "spawn", *SMOKE_ARGS]) == []  # no fork server then
    assert preload(["--start_method=forkserver", *SMOKE_ARGS]) == OWN_PRELOAD


# Imports the preload with every way torch asks for a CUDA device recorded: a server that had asked
# could fork no worker that uses the GPU.
PRELOAD_PROBE = """
import json, sys, threading
import torch
asked = []
def recording(name, ask):
    def recorded(*args, **kwargs):
        asked.append(name)
        return ask(*args, **kwargs)
    return recorded
for name in ("device_count", "is_available", "_lazy_init", "current_device", "get_device_properties", "get_device_capability"):
    setattr(torch.cuda, name, recording(name, getattr(torch.cuda, name)))
torch._C._cuda_getDeviceCount = recording("_cuda_getDeviceCount", torch._C._cuda_getDeviceCount)
for module in sys.argv[1:]:
    __import__(module)
print(json.dumps({"asked": asked, "initialized": torch.cuda.is_initialized(), "threads": threading.active_count(),
                  "imported": [module for module in sys.argv[1:] if module in sys.modules]}))
"""


def test_the_fork_servers_imports_ask_for_no_device_and_start_no_thread():
    """What the server imports before it forks workers leaves them free to use a GPU, and forks
    no thread's state into them (a thread does not survive a fork; a lock it held stays held)."""
    result = subprocess.run([sys.executable, "-c", PRELOAD_PROBE, *OWN_PRELOAD], capture_output=True, text=True, cwd=REPO, timeout=25)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout) == {"asked": [], "initialized": False, "threads": 1, "imported": OWN_PRELOAD}


def test_a_torchrun_held_back_waits_for_its_go_with_the_same_command_line():
    argv = torchrun_argv(world(), SMOKE_ARGS, python="python")
    assert held_back(argv) == ["python", "-m", "trainer.pod.agent", AWAIT_START, *argv[3:]]


def test_torchrun_env_carries_the_resolved_node_rank_even_when_the_pod_env_left_it_empty():
    env = pod_env("w-1", 29500, backend="static")
    assert env[c.PET_NODE_RANK.name] == ""  # torchrun would fail to parse this as --node-rank's default
    run_env = torchrun_env(resolve_world(env, "w-1"), env)
    assert (run_env[c.NODE_RANK.name], run_env[c.PET_NODE_RANK.name]) == ("1", "1")
    untouched = {k: v for k, v in env.items() if k not in (c.NODE_RANK.name, c.PET_NODE_RANK.name)}
    assert {k: v for k, v in run_env.items() if k in untouched} == untouched


def test_torchrun_env_drops_the_node_rank_mirror_where_torchrun_ignores_it():
    env = pod_env("w-1", 29500, backend="c10d", node_rank="1", **{c.PET_NODE_RANK.name: "1"})
    run_env = torchrun_env(resolve_world(env, "w-1"), env)
    assert c.PET_NODE_RANK.name not in run_env and run_env[c.NODE_RANK.name] == "1"


def test_the_local_address_found_by_the_preflight_is_advertised():
    assert flags(torchrun_argv(world(), ["train.py"], local_addr="10.1.2.3"))["local-addr"] == "10.1.2.3"
    assert "local-addr" not in flags(torchrun_argv(world(), ["train.py"]))
