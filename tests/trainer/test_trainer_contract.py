"""The image side of the env contract: the pod env is read only through trainer/contract.py's names."""

from __future__ import annotations

import ast

import pytest
from trainer_testing import REPO

from trainer import contract as c

pytestmark = pytest.mark.timeout(30)

# Variables that are not the pod's: torchrun sets them for each worker, the NVIDIA runtime its devices.
NOT_POD_ENV = {"RANK", "LOCAL_RANK", "CUDA_VISIBLE_DEVICES", "TORCHELASTIC_RESTART_COUNT"}


def env_names_written_as_literals(tree: ast.AST) -> set[str]:
    """String literals used as keys of env / os.environ: `env.get("X")`, `env["X"]`, `"X" in os.environ`."""

    def is_env(node: ast.AST) -> bool:
        return (isinstance(node, ast.Name) and node.id == "env") or (isinstance(node, ast.Attribute) and node.attr == "environ")

    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and is_env(node.func.value):
            found |= {a.value for a in node.args[:1] if isinstance(a, ast.Constant)}
        elif isinstance(node, ast.Subscript) and is_env(node.value) and isinstance(node.slice, ast.Constant):
            found.add(node.slice.value)
        elif isinstance(node, ast.Compare) and any(is_env(x) for x in node.comparators) and isinstance(node.left, ast.Constant):
            found.add(node.left.value)
    return found


def test_the_trainer_reads_no_pod_variable_by_a_literal_name():
    literals = set()
    for path in (REPO / "trainer").rglob("*.py"):
        if path.name != "contract.py":
            literals |= env_names_written_as_literals(ast.parse(path.read_text()))
    assert literals <= NOT_POD_ENV, f"use trainer/contract.py's constants for {sorted(literals - NOT_POD_ENV)}"
    assert not NOT_POD_ENV & {v.name for v in c.ALL}


def test_contract_names_are_unique_and_mirrors_point_at_contract_names():
    names = [v.name for v in c.ALL]
    assert len(names) == len(set(names))
    assert set(c.PET_MIRRORS) | set(c.PET_MIRRORS.values()) <= set(names)
    assert all(mirror.startswith("PET_") for mirror in c.PET_MIRRORS)


def test_the_default_args_are_what_a_user_would_write_after_torchrun():
    assert c.ENTRYPOINT_COMMAND == ("python", "-m", "trainer.entrypoint")
    assert c.DEFAULT_TRAIN_ARGS[:3] == ("-m", "trainer.train", "smoke")
