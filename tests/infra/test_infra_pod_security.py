"""The Pod Security level of a pod spec, on the program's own pods and on what an escape hatch
could add to them."""

from __future__ import annotations

import copy

import pytest

from ddp_infra.pod_security import BASELINE, PRIVILEGED, RESTRICTED, pod_security_level
from infra_harness import evaluated


def trainer_pod() -> dict:
    return copy.deepcopy(evaluated("prod", 8).pod_spec)


def with_sidecar(security_context: dict | None) -> dict:
    spec = trainer_pod()
    sidecar = {"name": "log-shipper", "image": "fluent-bit:3"}
    if security_context is not None:
        sidecar["securityContext"] = security_context
    spec["initContainers"] = [{**sidecar, "restartPolicy": "Always"}]
    return spec


RESTRICTED_CONTEXT = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_trainers_pods_meet_restricted(stack):
    assert pod_security_level(evaluated(stack, 4).pod_spec) == RESTRICTED


@pytest.mark.parametrize(
    "change, level",
    [
        (lambda spec: spec, RESTRICTED),
        (lambda spec: with_sidecar(RESTRICTED_CONTEXT), RESTRICTED),
        (lambda spec: with_sidecar(None), BASELINE),  # may escalate, keeps every capability
        (lambda spec: with_sidecar({**RESTRICTED_CONTEXT, "capabilities": {"drop": ["ALL"], "add": ["CHOWN"]}}), BASELINE),
        (lambda spec: with_sidecar({**RESTRICTED_CONTEXT, "capabilities": {"add": ["SYS_ADMIN"]}}), PRIVILEGED),
        (lambda spec: with_sidecar({**RESTRICTED_CONTEXT, "privileged": True}), PRIVILEGED),
        (lambda spec: with_sidecar({**RESTRICTED_CONTEXT, "runAsUser": 0}), BASELINE),
        (lambda spec: {**spec, "volumes": spec["volumes"] + [{"name": "nfs", "nfs": {"server": "nfs", "path": "/"}}]}, BASELINE),
        (lambda spec: {**spec, "volumes": spec["volumes"] + [{"name": "host", "hostPath": {"path": "/var/log"}}]}, PRIVILEGED),
        (lambda spec: {**spec, "hostNetwork": True}, PRIVILEGED),
    ],
    ids=["as-is", "restricted-sidecar", "plain-sidecar", "added-chown", "added-sys-admin", "privileged",
         "root-sidecar", "nfs-volume", "host-path", "host-network"],  # fmt: skip
)
def test_the_level_is_the_strictest_the_pod_meets(change, level):
    assert pod_security_level(change(trainer_pod())) == level
