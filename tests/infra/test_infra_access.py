"""The access check (ddp_infra/access.py): it asks about every kind the program registers, under each
config, and reads the API server's answers. Against a real API server with RBAC, through the engine:
tests/engine/test_engine_prod_stack.py."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest

from infra_harness import evaluate, stack_config_with

from ddp_infra import access
from ddp_infra import config as stack_config
from ddp_infra.names import PROJECT
from ddp_infra.pod import pod_template
from ddp_infra.world import World

CONFIGS: dict[str, tuple[str, dict[str, Any], tuple[str, ...]]] = {
    "dev": ("dev", {}, ()),
    "prod": ("prod", {}, ()),
    "statefulset": ("dev", {"workload__kind": "statefulset"}, ()),
    "jobset": ("dev", {"workload__kind": "jobset"}, ()),
    "volcano": ("prod", {"scheduling__gang": {"scheduler": "volcano", "queue": "research"}}, ()),
    "namespace not made": ("dev", {"namespace__create": False}, ()),
    "store on pod 0": ("dev", {"rendezvous__store": "pod-0"}, ()),
    "an HF token": ("dev", {"hfToken": "hf_unused"}, ("hfToken",)),
    "secret env": ("dev", {"secretEnv": {"WANDB_API_KEY": "unused"}}, ("secretEnv",)),
}


@pytest.mark.parametrize("name", CONFIGS)
def test_the_kinds_asked_about_are_those_the_program_registers(name):
    stack, changes, secret_keys = CONFIGS[name]
    values = stack_config_with(stack, **changes)
    evaluation = evaluate(values, stack=stack, secret_keys=secret_keys)
    assert evaluation.error is None, str(evaluation.error)
    secrets = {key: values.pop(key) for key in secret_keys}
    if "secretEnv" in secrets:  # the program reads each of its values as a secret Output
        values["secretEnv"] = {name: pulumi.Output.secret(value) for name, value in secrets["secretEnv"].items()}
    hf_token = pulumi.Output.secret(secrets["hfToken"]) if "hfToken" in secrets else None
    world = World.from_config(stack_config.parse(values, hf_token=hf_token), PROJECT, stack)
    asked = access.registered_kinds(world, pod_template(world))
    assert sorted(asked) == sorted({manifest["kind"] for manifest in evaluation.kubernetes_manifests})
    assert set(asked) <= set(access.RESOURCES), "each kind has its resource's name"


def test_each_kind_is_asked_about_with_each_verb_in_the_namespace_unless_cluster_wide():
    request = access.reviews(["Namespace", "NetworkPolicy"], "team-a")
    attributes = [item["spec"]["resourceAttributes"] for item in request["items"]]
    assert {item["kind"] for item in request["items"]} == {"SelfSubjectAccessReview"}
    assert attributes == [
        *({"group": "", "resource": "namespaces", "verb": verb} for verb in access.VERBS),
        *({"group": "networking.k8s.io", "resource": "networkpolicies", "verb": verb, "namespace": "team-a"} for verb in access.VERBS),
    ]


def answered(request: dict[str, Any], refused: dict[tuple[str, str], str]) -> list[dict[str, Any]]:
    """The API server's answers: each review back with its status, refused where (resource, verb) is listed."""
    answers = []
    for item in request["items"]:
        attributes = item["spec"]["resourceAttributes"]
        reason = refused.get((attributes["resource"], attributes["verb"]))
        answers.append({**item, "status": {"allowed": reason is None, **({"reason": reason} if reason else {})}})
    return answers


def test_refusals_are_one_line_per_resource_with_its_verbs_where_and_the_servers_reason():
    request = access.reviews(["Namespace", "PersistentVolumeClaim", "Job"], "team-a")
    refused = {("namespaces", "create"): "", ("jobs", "delete"): "no RBAC policy matched", ("jobs", "patch"): "no RBAC policy matched"}
    assert access.refusals(answered(request, refused)) == [
        "may not create namespaces (cluster-wide)",
        "may not patch, delete jobs.batch in namespace team-a (no RBAC policy matched)",
    ]
    assert access.refusals(answered(request, {})) == []


def test_kubectls_answer_is_read_as_one_document_after_another():
    assert access.json_documents('{"kind": "A"}\n{"kind": "B", "items": [1]}\n') == [{"kind": "A"}, {"kind": "B", "items": [1]}]
    assert access.json_documents("") == []
