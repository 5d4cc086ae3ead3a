"""Fixtures for the program's mock tests: each configuration is evaluated once per session
(see infra_harness.evaluated)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # ddp_infra and trainer, also under plain `pytest`

import infra_harness as harness  # noqa: E402
from trainer import contract  # noqa: E402


@pytest.fixture(params=harness.STACKS)
def stack(request) -> str:
    return request.param


@pytest.fixture(params=harness.NODE_COUNTS)
def nodes(request) -> int:
    return request.param


@pytest.fixture(params=contract.WORKLOAD_KINDS)
def kind(request) -> str:
    return request.param


@pytest.fixture
def evaluation(stack: str, nodes: int, kind: str) -> harness.Evaluation:
    return harness.evaluated(stack, nodes, kind)
