"""Fixtures for the program's mock tests: each configuration is evaluated once per session."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the harness
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # ddp_infra and trainer

import harness  # noqa: E402

NODE_COUNTS = (1, 4, 64, 512)


@functools.cache
def evaluated(stack: str, nodes: int, kind: str = "statefulset") -> harness.Evaluation:
    values = harness.with_path(harness.stack_file_config(stack), "nodes", str(nodes))
    if kind != "statefulset":
        values = harness.with_path(values, "workload.kind", kind)
    evaluation = harness.evaluate(values, stack=stack)
    assert evaluation.error is None, str(evaluation.error)
    return evaluation


@pytest.fixture(params=harness.STACKS)
def stack(request) -> str:
    return request.param


@pytest.fixture(params=NODE_COUNTS)
def nodes(request) -> int:
    return request.param


@pytest.fixture(params=("statefulset", "job"))
def kind(request) -> str:
    return request.param


@pytest.fixture
def evaluation(stack: str, nodes: int, kind: str) -> harness.Evaluation:
    return evaluated(stack, nodes, kind)
