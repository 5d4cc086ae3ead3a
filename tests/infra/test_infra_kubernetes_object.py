"""Every object registers as pulumi-kubernetes' typed class of its kind would register it: the same
type, inputs, plugin version and secret outputs, so the state and the diff are the typed class's.
The program itself never imports the typed classes (see ddp_infra/components/kubernetes_object.py)."""

from __future__ import annotations

import re

import pulumi
import pulumi_kubernetes as k8s
import pytest

import infra_harness as harness


def _typed_class(api_version: str, kind: str):
    group, _, version = api_version.rpartition("/")
    module = getattr(k8s, (group or "core").split(".")[0])
    return getattr(getattr(module, version), kind)


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _as_typed(manifest: dict) -> harness.Registered:
    """The manifest registered through its typed class, under the same mocks."""
    monitor = harness.RecordingMonitor(harness.EchoMocks())
    pulumi.runtime.set_mocks(harness.EchoMocks(), project=harness.PROJECT, stack="dev", preview=False, monitor=monitor)

    @pulumi.runtime.test
    def register():
        fields = {_snake(key): value for key, value in manifest.items() if key not in ("apiVersion", "kind")}
        resource = _typed_class(manifest["apiVersion"], manifest["kind"])("typed", **fields)
        return resource.urn

    register()
    (registered,) = monitor.registered
    return registered


@pytest.mark.parametrize("kind", ["job", "statefulset"])
def test_each_object_registers_as_its_typed_class(kind):
    values = harness.stack_config_with("prod", workload__kind=kind, hfToken="hf_object_test")
    evaluation = harness.evaluate(values, stack="prod", secret_keys=("hfToken",))
    objects = [r for r in evaluation.registered if r.custom and r.type.startswith("kubernetes:")]
    assert {r.manifest["kind"] for r in objects} >= {"Namespace", "PersistentVolumeClaim", "Service", "ServiceAccount",
                                                     "NetworkPolicy", "PodDisruptionBudget", "Secret"}  # fmt: skip
    for ours in objects:
        typed = _as_typed(ours.manifest)
        assert (ours.type, ours.version) == (typed.type, typed.version)
        assert ours.manifest == typed.manifest
        assert ours.additional_secret_outputs == typed.additional_secret_outputs
