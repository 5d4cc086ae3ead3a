"""One home for each default and rule both sides read: trainer/contract.py.

The stack's config takes each as its default or bound, and the pod falls back on it where its
variable is unset. Neither side writes the number itself, so the two cannot drift apart.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Callable

import pytest
from trainer_testing import pod_env

from ddp_infra.config.network import RendezvousConfig
from ddp_infra.config.workload import HangTimeoutConfig
from trainer import contract as c
from trainer.hang_watch import HangLimits
from trainer.pod.env import resolve_world
from trainer.pod.pod_world import PodWorld

REPO = Path(__file__).resolve().parents[1]

# The contract's default -> the stack's config field that takes it.
STACK_DEFAULTS = {
    "STACK_JOIN_TIMEOUT_SECONDS": (RendezvousConfig, "join_timeout_seconds"),
    "READ_TIMEOUT_SECONDS": (RendezvousConfig, "read_timeout_seconds"),
    "LAST_CALL_TIMEOUT_SECONDS": (RendezvousConfig, "last_call_timeout_seconds"),
    "CLOSE_TIMEOUT_SECONDS": (RendezvousConfig, "close_timeout_seconds"),
    "KEEP_ALIVE_INTERVAL_SECONDS": (RendezvousConfig, "keep_alive_interval_seconds"),
    "KEEP_ALIVE_MAX_ATTEMPTS": (RendezvousConfig, "keep_alive_max_attempts"),
    "WORLD_MAX_RESTARTS": (RendezvousConfig, "max_restarts"),
    "MASTER_WAIT_TIMEOUT_SECONDS": (RendezvousConfig, "master_wait_timeout_seconds"),
    "HANG_FLOOR_SECONDS": (HangTimeoutConfig, "floor_seconds"),
    "HANG_CEILING_SECONDS": (HangTimeoutConfig, "ceiling_seconds"),
}
# The contract's bound -> the stack's config field and the constraint that takes it.
STACK_BOUNDS = {"KEEP_ALIVE_MIN_ATTEMPTS": (RendezvousConfig, "keep_alive_max_attempts", "ge")}

# The files where the pod falls back on the contract's defaults.
POD_FILES = ("trainer/pod/env.py", "trainer/pod/env_reader.py", "trainer/pod/stack_env.py", "trainer/pod/platform_env.py",
             "trainer/pod/pod_world.py", "trainer/hang_watch.py")  # fmt: skip
# The pod's own numbers that happen to equal a contract default, and why they are not one.
POD_OWN = {"DEFAULT_SHUTDOWN_TIMEOUT": "torchrun's own; the stack derives SHUTDOWN_TIMEOUT from the grace period"}
# 0 and 1 mean "none" and "one" too often to tell from a restated default; the fallback tests below hold those.
TOO_COMMON = {0, 1}


def a_pod_the_stack_made_without_its_optional_variables() -> PodWorld:
    optional = (c.RDZV_READ_TIMEOUT, c.RDZV_LAST_CALL_TIMEOUT, c.RDZV_CLOSE_TIMEOUT, c.RDZV_KEEP_ALIVE_INTERVAL,
                c.RDZV_KEEP_ALIVE_MAX_ATTEMPTS, c.MASTER_WAIT_TIMEOUT)  # fmt: skip
    env = pod_env("w-0", 29500)
    for var in optional:
        env.pop(var.name, None)
    return resolve_world(env, "w-0")


def a_seed_000_pod() -> PodWorld:
    env = {"POD_NAME": "train-0", "SVC_NAME": "svc", "POD_NUMS": "2", "POD_PORT": "29500", "POD_NAMESPACE": "ml"}
    return resolve_world(env, "train-0")


# The contract's default -> what the pod falls back on when its variable is unset.
# The rendezvous timeouts, as each kind of pod (the stack's, seed 000's) reads them (PodWorld.timeouts).
TIMEOUT_FALLBACKS = {
    "READ_TIMEOUT_SECONDS": "read", "LAST_CALL_TIMEOUT_SECONDS": "last_call", "CLOSE_TIMEOUT_SECONDS": "close",
    "KEEP_ALIVE_INTERVAL_SECONDS": "keep_alive", "KEEP_ALIVE_MAX_ATTEMPTS": "keep_alive_max_attempts",
}  # fmt: skip
POD_FALLBACKS: list[tuple[str, Callable[[], float]]] = [
    *((name, lambda pod=pod, field=field: getattr(pod().timeouts, field))
      for pod in (a_pod_the_stack_made_without_its_optional_variables, a_seed_000_pod) for name, field in TIMEOUT_FALLBACKS.items()),
    ("MASTER_WAIT_TIMEOUT_SECONDS", lambda: a_pod_the_stack_made_without_its_optional_variables().master_wait_timeout),
    ("SEED_000_JOIN_TIMEOUT_SECONDS", lambda: a_seed_000_pod().timeouts.join),
    ("WORLD_MAX_RESTARTS", lambda: a_seed_000_pod().max_restarts),
    ("MASTER_WAIT_TIMEOUT_SECONDS", lambda: a_seed_000_pod().master_wait_timeout),
    ("HANG_FLOOR_SECONDS", lambda: HangLimits.from_env({}).floor_s),
    ("HANG_CEILING_SECONDS", lambda: HangLimits.from_env({}).ceiling_s),
    ("HANG_FLOOR_SECONDS", lambda: HangLimits().floor_s),
    ("HANG_CEILING_SECONDS", lambda: HangLimits().ceiling_s),
]


@pytest.mark.parametrize("name", STACK_DEFAULTS)
def test_the_stacks_default_is_the_contracts(name):
    model, field = STACK_DEFAULTS[name]
    assert model.model_fields[field].default == getattr(c, name)


@pytest.mark.parametrize(("name", "fallback"), POD_FALLBACKS)
def test_a_pod_without_the_variable_falls_back_on_the_contracts_default(name, fallback):
    assert fallback() == getattr(c, name)


def test_a_pod_refuses_what_the_stack_refuses_below_the_contracts_bound():
    env = pod_env("w-0", 29500, **{c.RDZV_KEEP_ALIVE_MAX_ATTEMPTS.name: str(c.KEEP_ALIVE_MIN_ATTEMPTS - 1)})
    with pytest.raises(ValueError, match=f"{c.RDZV_KEEP_ALIVE_MAX_ATTEMPTS.name}.*>= {c.KEEP_ALIVE_MIN_ATTEMPTS}"):
        resolve_world(env, "w-0")
    with pytest.raises(ValueError):
        RendezvousConfig(keep_alive_max_attempts=c.KEEP_ALIVE_MIN_ATTEMPTS - 1)


def field_call(model: type, field: str) -> ast.Call:
    """The `Field(...)` that declares `field` in `model`'s source."""
    for node in ast.walk(ast.parse(inspect.getsource(model))):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == field:
            assert isinstance(node.value, ast.Call), f"{model.__name__}.{field} is not declared with Field(...)"
            return node.value
    raise AssertionError(f"{model.__name__}.{field} not found in its source")


def names_the_contract(node: ast.AST | None, name: str) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == name and isinstance(node.value, ast.Name) and node.value.id == "contract"


@pytest.mark.parametrize("name", STACK_DEFAULTS)
def test_the_stack_names_the_contract_for_its_default(name):
    model, field = STACK_DEFAULTS[name]
    call = field_call(model, field)
    default = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "default"), None)
    assert names_the_contract(default, name), f"{model.__name__}.{field}: write contract.{name}, not its value"


@pytest.mark.parametrize("name", STACK_BOUNDS)
def test_the_stack_names_the_contract_for_its_bound(name):
    model, field, constraint = STACK_BOUNDS[name]
    bound = next((k.value for k in field_call(model, field).keywords if k.arg == constraint), None)
    assert names_the_contract(bound, name), f"{model.__name__}.{field} {constraint}: write contract.{name}, not its value"


def names_a_contract_variable(call: ast.Call) -> bool:
    """`read(c.X.name, ...)`, `read(c.X, ...)`: a call about one of the contract's variables."""
    return any(
        isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "c"
        for arg in [*call.args, *(k.value for k in call.keywords)] for node in ast.walk(arg)
    )  # fmt: skip


def fallback_literals(tree: ast.Module) -> list[tuple[str, int, float]]:
    """(where, line, value) of each number in a place a fallback or bound is written: a module
    constant, a `default=` argument, an argument beside a contract variable, the right of an `or`,
    a dataclass field's default."""
    found = []

    def numbers(where: str, node: ast.AST) -> None:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            found.append((where, node.lineno, node.value))

    for statement in tree.body:
        if isinstance(statement, ast.Assign):
            numbers(", ".join(ast.unparse(t) for t in statement.targets), statement.value)
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "default":
            numbers("default=", node.value)
        elif isinstance(node, ast.Call) and names_a_contract_variable(node):
            for arg in node.args:
                numbers(f"{ast.unparse(node.func)}(...)", arg)
        elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            for value in node.values[1:]:
                numbers("or", value)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and item.value is not None:
                    numbers(f"{node.name}.{ast.unparse(item.target)}", item.value)
    return found


def test_the_pod_restates_no_contract_default_or_bound():
    shared = {*STACK_DEFAULTS, *STACK_BOUNDS, *(name for name, _ in POD_FALLBACKS)}
    defaults = {getattr(c, name) for name in shared} - TOO_COMMON
    restated = [
        f"{path}:{line} {where} {value}"
        for path in POD_FILES
        for where, line, value in fallback_literals(ast.parse((REPO / path).read_text()))
        if value in defaults and where not in POD_OWN
    ]
    assert not restated, f"write the contract's name (trainer/contract.py), not its value: {restated}"


def test_both_sides_bound_a_hang_by_the_contracts_rule():
    floor, ceiling = 5.0, 1000.0
    for slowest_step in (None, 0.1, 7.0, 500.0):
        assert HangLimits(floor, ceiling).bound(slowest_step) == c.hang_bound(floor, ceiling, slowest_step)
    assert c.hang_bound(floor, ceiling, 7.0) == c.HANG_STEP_TIME_FACTOR * 7.0
    assert c.HANG_BOUND_RULE in HangTimeoutConfig.model_fields["floor_seconds"].description
    assert c.HANG_BOUND_RULE in c.HANG_TIMEOUT_FLOOR.meaning
