"""Secret env (`secretEnv`): values set with `pulumi config set --secret --path 'secretEnv.NAME'`
reach the pods through a Secret of their own, and nothing else holds them in plain text."""

from __future__ import annotations

import logging

import pulumi
import pytest
from pulumi.runtime import rpc

import infra_harness as harness
from ddp_infra.names import SECRETS_DIGEST_ANNOTATION

VALUES = {"MLFLOW_TRACKING_TOKEN": "mlflow-token-that-must-never-leak-0123", "MLFLOW_TRACKING_PASSWORD": "pw-never-leaks-4567"}
SECRET = "kubernetes:core/v1:Secret"


def with_secret_env(stack: str = "dev", values: dict[str, str] = VALUES, base: dict | None = None) -> dict:
    config = base if base is not None else harness.stack_file_config(stack)
    for name, value in values.items():
        config = harness.with_path(config, f"secretEnv.{name}", value)
    return config


def evaluate(values: dict, stack: str = "dev", secret_keys: tuple[str, ...] = ("secretEnv",)) -> harness.Evaluation:
    return harness.evaluate(values, stack=stack, secret_keys=secret_keys)


@pytest.fixture(scope="module", params=harness.STACKS)
def with_secrets(request):
    return evaluate(with_secret_env(request.param), stack=request.param)


def env_secret(evaluation: harness.Evaluation) -> harness.Registered:
    (secret,) = [r for r in evaluation.of_type(SECRET) if r.manifest["metadata"]["name"].endswith("-env")]
    return secret


@pulumi.runtime.test
def test_values_reach_only_their_secret_and_only_wrapped(with_secrets):
    evaluation = with_secrets
    assert evaluation.error is None, str(evaluation.error)
    for resource in evaluation.registered:
        for value in VALUES.values():
            assert not harness.holds_in_plain_text(resource.inputs, value), f"{resource.name} holds a secret env value in plain text"
    secret = env_secret(evaluation)
    assert secret.manifest["metadata"]["name"] == "trainer-env"
    assert secret.manifest["stringData"] == VALUES  # there, but only inside secrets


@pulumi.runtime.test
def test_pods_read_each_value_from_the_secret_after_the_contract_env(with_secrets):
    evaluation = with_secrets
    secret = env_secret(evaluation)
    env = evaluation.container["env"]
    names = [var["name"] for var in env]
    for name in VALUES:
        (var,) = [var for var in env if var["name"] == name]
        assert var == {"name": name, "valueFrom": {"secretKeyRef": {"name": "trainer-env", "key": name}}}
        assert names.index(name) > names.index("HOME")
    assert secret.urn in evaluation.workload.dependencies


@pulumi.runtime.test
def test_values_are_not_in_outputs(with_secrets):
    evaluation = with_secrets
    for value in VALUES.values():
        assert value not in repr(evaluation.outputs) and not harness.holds_in_plain_text(evaluation.outputs, value)
    assert not evaluation.secret_outputs


@pulumi.runtime.test
def test_values_are_not_logged(caplog):
    with caplog.at_level(logging.DEBUG):
        evaluation = evaluate(with_secret_env())
    assert evaluation.error is None
    for value in VALUES.values():
        assert value not in caplog.text


@pulumi.runtime.test
def test_the_token_secret_stays_as_it_was_beside_them():
    """Existing stacks with a token see no change to its Secret when they add secret env."""
    token = harness.with_path(harness.stack_file_config("dev"), "hfToken", "hf_token_0123")
    before = evaluate(token, secret_keys=("hfToken",))
    after = evaluate(with_secret_env(base=token), secret_keys=("hfToken", "secretEnv"))
    assert after.error is None, str(after.error)
    (token_secret,) = [r for r in before.of_type(SECRET)]
    (same,) = [r for r in after.of_type(SECRET) if r.name == token_secret.name]
    assert same.manifest == token_secret.manifest


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
    ({"secretEnv": {"A" * 254: "s3cr3t-value"}}, "ddp-infra:secretEnv." + "A" * 254, "at most 253 characters"),
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


@pulumi.runtime.test
def test_no_secret_env_no_secret():
    evaluation = harness.evaluate(harness.stack_file_config("dev"))
    assert evaluation.error is None
    assert not evaluation.of_type(SECRET)


@pulumi.runtime.test
def test_a_secret_set_without_path_is_an_unknown_key_shown_without_its_value():
    """`pulumi config set --secret secretEnv.X v` (no --path) stores a key named `secretEnv.X`."""
    values = {**harness.stack_file_config("dev"), "secretEnv.MLFLOW_TRACKING_TOKEN": "s3cr3t-value"}
    evaluation = evaluate(values, secret_keys=("secretEnv.MLFLOW_TRACKING_TOKEN",))
    (problem,) = evaluation.error.problems
    assert problem.key == 'ddp-infra:["secretEnv.MLFLOW_TRACKING_TOKEN"]' and "a known key" in problem.allowed
    assert "s3cr3t-value" not in str(evaluation.error)


@pulumi.runtime.test
def test_a_changed_value_changes_the_pod_template_which_carries_only_its_secret_digest():
    """A container reads secretKeyRef env when it starts: a fixed credential must restart a world
    that failed on the wrong one, as any change of its template does."""
    digests = {}
    for label, values in (("first", VALUES), ("same", dict(VALUES)), ("rotated", {**VALUES, "MLFLOW_TRACKING_TOKEN": "rotated-token-89"})):
        evaluation = evaluate(with_secret_env(values=values))
        # the digest is a secret too (a short password's SHA-256 can be searched for); the SDK reports a
        # secret inside a property as the whole property's
        assert rpc.is_rpc_secret(evaluation.workload.inputs["spec"])
        digests[label] = evaluation.pod_template["metadata"]["annotations"][SECRETS_DIGEST_ANNOTATION]
    assert digests["first"] == digests["same"] != digests["rotated"]
    with_token = evaluate(harness.with_path(with_secret_env(), "hfToken", "hf_token_0123"), secret_keys=("secretEnv", "hfToken"))
    assert with_token.pod_template["metadata"]["annotations"][SECRETS_DIGEST_ANNOTATION] != digests["first"]
    plain = harness.evaluate(harness.stack_file_config("dev"))
    assert SECRETS_DIGEST_ANNOTATION not in plain.pod_template["metadata"].get("annotations", {})
    assert not rpc.is_rpc_secret(plain.workload.inputs["spec"])
