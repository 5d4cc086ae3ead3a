"""Secret env (`secretEnv`): values set with `pulumi config set --secret --path 'secretEnv.NAME'`
reach the pods through a Secret of their own, and nothing else holds them in plain text."""

from __future__ import annotations

import pulumi
import pytest

import infra_harness as harness

VALUES = {"MLFLOW_TRACKING_TOKEN": "mlflow-token-that-must-never-leak-0123", "MLFLOW_TRACKING_PASSWORD": "pw-never-leaks-4567"}


def with_secret_env(stack: str = "dev", values: dict[str, str] = VALUES, base: dict | None = None) -> dict:
    config = base if base is not None else harness.stack_file_config(stack)
    for name, value in values.items():
        config = harness.with_path(config, f"secretEnv.{name}", value)
    return config


def evaluate(values: dict, stack: str = "dev", secret_keys: tuple[str, ...] = ("secretEnv",)) -> harness.Evaluation:
    return harness.evaluate(values, stack=stack, secret_keys=secret_keys)


@pulumi.runtime.test
def test_values_stored_in_plain_text_are_refused_without_showing_them():
    evaluation = evaluate(with_secret_env(), secret_keys=())  # `config set --path` without --secret
    assert evaluation.registered == []
    assert [problem.key for problem in evaluation.error.problems] == ["ddp-infra:secretEnv"]
    assert "--secret" in evaluation.error.problems[0].allowed
    for value in VALUES.values():
        assert value not in str(evaluation.error)


@pytest.mark.parametrize("changes, key, allowed", [
    ({"secretEnv": {"1BAD": "s3cr3t-value"}}, 'ddp-infra:secretEnv["1BAD"]', "an env var name"),
    ({"secretEnv": {"NNODES": "s3cr3t-value"}}, "ddp-infra:secretEnv.NNODES", "env contract"),
    ({"secretEnv": {"HF_TOKEN": "s3cr3t-value"}}, "ddp-infra:secretEnv.HF_TOKEN", "env contract"),
    ({"secretEnv": {"PET_NNODES": "s3cr3t-value"}}, "ddp-infra:secretEnv.PET_NNODES", "env contract"),
    ({"secretEnv": {"HOME": "s3cr3t-value"}}, "ddp-infra:secretEnv.HOME", "env contract"),
    ({"secretEnv": {"MLFLOW_TRACKING_TOKEN": "s3cr3t-value"}, "env": {"MLFLOW_TRACKING_TOKEN": "x"}},
     "ddp-infra:secretEnv.MLFLOW_TRACKING_TOKEN", "not in env"),
    ({"secretEnv": {"TOKEN": {"nested": "s3cr3t-value"}}}, "ddp-infra:secretEnv.TOKEN", "--secret --path"),
])  # fmt: skip
@pulumi.runtime.test
def test_a_bad_name_is_refused_naming_it_but_not_its_value(changes, key, allowed):
    values = harness.stack_file_config("dev")
    for path, value in changes.items():
        values = harness.with_path(values, path, value)
    evaluation = evaluate(values)
    assert evaluation.registered == []
    (problem,) = evaluation.error.problems
    assert problem.key == key and allowed in problem.allowed, str(problem)
    assert "s3cr3t-value" not in str(evaluation.error)
