"""Fixtures for the trainer's tests."""

from __future__ import annotations

import subprocess

import pytest
from trainer_testing import REPO, Proc, kill_tree, uninterrupted_result

from trainer import distributed


@pytest.fixture
def world_of_one():
    """This process as a world of one (gloo, in-memory store), as `python -m trainer.train` runs it."""
    d = distributed.init("cpu", 60)
    yield d
    distributed.shutdown()


@pytest.fixture
def compiled_graphs(monkeypatch):
    """Every graph torch.compile is given during the test: the functions each calls (the graphs run as
    they are, uncompiled). Dynamo's caches are emptied before and after, so what compiles here is new."""
    import torch

    graphs: list[set[str]] = []

    def recording_backend(graph, example_inputs):
        graphs.append({getattr(node.target, "__name__", str(node.target)) for node in graph.graph.nodes if node.op == "call_function"})
        return graph.forward

    compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda model, **options: compile(model, backend=recording_backend, **options))
    torch._dynamo.reset()
    yield graphs
    torch._dynamo.reset()


@pytest.fixture
def spawn(tmp_path):
    """Start processes with their output in a log file; every one and all its descendants die at the end."""
    started: list[Proc] = []

    def start(args: list[str], env: dict[str, str], name: str) -> Proc:
        log = tmp_path / f"{name}.log"
        with open(log, "wb") as out:
            popen = subprocess.Popen(args, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        proc = Proc(popen, log)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        kill_tree(proc.pid)
        proc.popen.wait(10)


@pytest.fixture(scope="session")
def reference_result(tmp_path_factory):
    """The [DONE] result of an uninterrupted world of 2 processes (one pod, two workers), per args."""
    cache: dict[tuple[str, ...], dict[str, str]] = {}

    def result_of(args: list[str]) -> dict[str, str]:
        if tuple(args) not in cache:
            cache[tuple(args)] = uninterrupted_result(args, tmp_path_factory.mktemp("reference"))
        return cache[tuple(args)]

    return result_of
