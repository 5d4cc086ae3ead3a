"""The Hugging Face token: a Pulumi secret from config to the Secret object, and nowhere else."""

from __future__ import annotations

import logging

import pulumi
import pytest

import infra_harness as harness

TOKEN = "hf_ExampleTokenThatMustNeverLeak0123"
SECRET = "kubernetes:core/v1:Secret"


def with_token(stack: str) -> dict:
    return harness.with_path(harness.stack_file_config(stack), "hfToken", TOKEN)


@pytest.fixture(scope="module", params=harness.STACKS)
def with_secret_token(request):
    return harness.evaluate(with_token(request.param), stack=request.param, secret_keys=("hfToken",))


@pulumi.runtime.test
def test_token_reaches_only_the_secret_and_only_wrapped(with_secret_token):
    evaluation = with_secret_token
    assert evaluation.error is None, str(evaluation.error)
    secret = evaluation.one(SECRET)
    for resource in evaluation.registered:
        assert TOKEN not in harness.plain_strings(resource.inputs), f"{resource.name} holds the token in plain text"
    assert secret.manifest["stringData"] == {"token": TOKEN}  # it is there, but only inside a secret


@pulumi.runtime.test
def test_pods_read_the_token_from_the_secret(with_secret_token):
    evaluation = with_secret_token
    secret_name = evaluation.one(SECRET).manifest["metadata"]["name"]
    env = {var["name"]: var for var in evaluation.container["env"]}
    for name in ("HF_TOKEN", "HUGGINGFACE_HUB_TOKEN"):
        assert env[name]["valueFrom"]["secretKeyRef"] == {"name": secret_name, "key": "token"}
    assert evaluation.one(SECRET).urn in evaluation.workload.dependencies


@pulumi.runtime.test
def test_token_is_not_in_outputs(with_secret_token):
    evaluation = with_secret_token
    assert TOKEN not in repr(evaluation.outputs)
    assert not evaluation.secret_outputs  # nothing exported derives from the token


@pulumi.runtime.test
def test_token_is_not_logged(caplog):
    with caplog.at_level(logging.DEBUG):
        evaluation = harness.evaluate(with_token("dev"), secret_keys=("hfToken",))
    assert evaluation.error is None
    assert TOKEN not in caplog.text


@pulumi.runtime.test
def test_token_stored_in_plain_text_is_refused_without_showing_it():
    evaluation = harness.evaluate(with_token("dev"))  # not in the secret keys: `config set` without --secret
    assert evaluation.registered == []
    assert [problem.key for problem in evaluation.error.problems] == ["ddp-infra:hfToken"]
    assert TOKEN not in str(evaluation.error)


@pulumi.runtime.test
def test_no_token_no_secret():
    evaluation = harness.evaluate(harness.with_path(harness.stack_file_config("dev"), "hfToken", ""))
    assert evaluation.error is None
    assert not evaluation.of_type(SECRET)
    env = {var["name"] for var in evaluation.container["env"]}
    assert not env & {"HF_TOKEN", "HUGGINGFACE_HUB_TOKEN"}
