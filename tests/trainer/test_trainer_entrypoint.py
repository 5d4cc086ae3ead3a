"""The entrypoint as the container runs it: `python -m trainer.entrypoint <torchrun args>`."""

from __future__ import annotations

import subprocess

import pytest
from trainer_testing import PYTHON, REPO, SMOKE_ARGS, clean_env, free_port, pod_env

from trainer import contract as c

pytestmark = pytest.mark.timeout(60)


def run_entrypoint(env: dict[str, str], args: list[str] = SMOKE_ARGS) -> subprocess.CompletedProcess:
    command = [PYTHON if part == "python" else part for part in c.ENTRYPOINT_COMMAND]
    return subprocess.run([*command, *args], env=clean_env(**env), cwd=REPO, capture_output=True, text=True, timeout=60)


def test_a_broken_env_is_refused_with_every_problem_listed():
    env = pod_env("ddp-1", 29500, **{c.WORLD_SIZE.name: "3", c.RDZV_BACKEND.name: "zookeeper"})
    del env[c.MASTER_ADDR.name]
    result = run_entrypoint(env)
    assert result.returncode == c.EXIT_BAD_ENV
    assert "[DDP] cannot start" in result.stderr
    for name in (c.WORLD_SIZE.name, c.RDZV_BACKEND.name, c.MASTER_ADDR.name):
        assert f"  - {name}:" in result.stderr
    assert "torch.distributed.run" not in result.stdout


def test_an_empty_env_names_the_contract_variables():
    result = run_entrypoint({})
    assert result.returncode == c.EXIT_BAD_ENV
    assert all(f"  - {name}:" in result.stderr for name in c.REQUIRED)


def test_user_args_that_contradict_the_world_are_refused():
    result = run_entrypoint(pod_env("ddp-0", free_port()), ["--nproc-per-node=8", *SMOKE_ARGS])
    assert result.returncode == c.EXIT_BAD_ENV
    assert "--nproc-per-node" in result.stderr


def test_a_master_that_never_listens_fails_the_preflight_with_advice():
    env = pod_env("ddp-1", free_port(), **{c.MASTER_WAIT_TIMEOUT.name: "2"})
    result = run_entrypoint(env)
    assert result.returncode == c.EXIT_PREFLIGHT_FAILED
    assert result.stdout.startswith("[DDP] rank=1 nnodes=2 nproc_per_node=1 world_size=2 master=127.0.0.1:")
    assert "[PREFLIGHT] FAIL reach 127.0.0.1" in result.stdout and "next:" in result.stdout
    assert "not starting torchrun" in result.stderr


def test_seed000_variables_alone_reach_the_preflight():
    env = {"POD_NAME": "trainer-1", "SVC_NAME": "svc", "POD_NUMS": "2", "POD_PORT": "23456", "POD_NAMESPACE": "ns",
           c.MASTER_WAIT_TIMEOUT.name: "1"}  # fmt: skip
    result = run_entrypoint(env)
    assert result.returncode == c.EXIT_PREFLIGHT_FAILED
    assert "master=trainer-0.svc.ns.svc.cluster.local:23456" in result.stdout
    assert "DNS lookup still failing" in result.stdout
