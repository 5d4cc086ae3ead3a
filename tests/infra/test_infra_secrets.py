"""The Hugging Face token: a Pulumi secret from config to the Secret object, and nowhere else."""

from __future__ import annotations

import base64
import logging

import pulumi
import pytest
from pulumi.runtime import rpc

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
        assert not harness.holds_in_plain_text(resource.inputs, TOKEN), f"{resource.name} holds the token in plain text"
    assert secret.manifest["stringData"] == {"token": TOKEN}  # it is there, but only inside a secret


def test_the_plain_text_check_finds_the_token_inside_longer_values_and_in_base64():
    inside = {"env": [{"name": "X", "value": f"Bearer {TOKEN};"}]}
    encoded = {"data": {"token": base64.b64encode(TOKEN.encode()).decode()}}
    encoded_inside = {"data": {"cfg": base64.b64encode(f"token={TOKEN}\n".encode()).decode()}}
    url_safe = {"annotation": base64.urlsafe_b64encode(f"{TOKEN}??>>".encode()).decode()}
    for value in (inside, encoded, encoded_inside, url_safe):
        assert harness.holds_in_plain_text(value, TOKEN), value
    wrapped = {"data": {rpc._special_sig_key: rpc._special_secret_sig, "value": TOKEN}}
    assert not harness.holds_in_plain_text({"env": "hf_other", "secret": wrapped}, TOKEN)


@pulumi.runtime.test
def test_pods_read_the_token_from_the_secret(with_secret_token):
    evaluation = with_secret_token
    secret_name = evaluation.one(SECRET).manifest["metadata"]["name"]
    env = evaluation.env
    for name in ("HF_TOKEN", "HUGGINGFACE_HUB_TOKEN"):
        assert env[name]["valueFrom"]["secretKeyRef"] == {"name": secret_name, "key": "token"}
    assert evaluation.one(SECRET).urn in evaluation.workload.dependencies


@pulumi.runtime.test
def test_token_is_not_in_outputs(with_secret_token):
    evaluation = with_secret_token
    assert TOKEN not in repr(evaluation.outputs) and not harness.holds_in_plain_text(evaluation.outputs, TOKEN)
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
    assert not evaluation.env.keys() & {"HF_TOKEN", "HUGGINGFACE_HUB_TOKEN"}
