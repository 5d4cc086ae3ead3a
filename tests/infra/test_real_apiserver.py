"""The program's objects against a real Kubernetes API server (etcd + kube-apiserver on loopback,
built by toolchain/build.sh): admission, defaulting and validation as a cluster does them, and
what a scale-out really changes in the stored objects. A JobSet is checked against the schema of
JobSet's own CRD (from its module, kept by build.sh beside the controller).
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from ddp_infra.workload import pod_template_of
from infra_harness import evaluate, evaluated, stack_config_with
from toolchain import jobset
from toolchain.apiserver import LocalApiServer, find_tool, tool_dir
from trainer import contract

KUBECTL_TIMEOUT = 60


@pytest.fixture(scope="module")
def api():
    with LocalApiServer() as server:
        yield server


@pytest.fixture(params=contract.WORKLOAD_KINDS)
def kind(request, api) -> str:
    """Each workload kind; for jobset, JobSet's CRD installed first (a skip without it)."""
    if request.param == contract.JOBSET:
        try:
            manager = find_tool(jobset.MANAGER, tool_dir())
        except FileNotFoundError as missing:
            pytest.skip(f"JobSet's CRD comes with its controller, which the toolchain lacks: {missing}")
        crd = [doc for doc in jobset.api_objects(jobset.install_manifests(manager)) if doc["kind"] == "CustomResourceDefinition"]
        kubectl(api, "apply", "--server-side", "-f", "-", documents=crd)
        kubectl(api, "wait", "--for=condition=Established", "crd/jobsets.jobset.x-k8s.io", "--timeout=60s")
    return request.param


def objects(stack: str, nodes: int, kind: str = contract.STATEFULSET) -> list[dict[str, Any]]:
    """The Kubernetes objects the program registers, as the provider would send them."""
    return evaluated(stack, nodes, kind).kubernetes_manifests


def kubectl(api: LocalApiServer, *args: str, documents: list[dict[str, Any]] | None = None) -> str:
    return kubectl_run(api, *args, documents=documents).stdout


def kubectl_run(api: LocalApiServer, *args: str, documents: list[dict[str, Any]] | None = None) -> subprocess.CompletedProcess:
    """kubectl's stdout and its stderr, where the API server's warnings land."""
    result = subprocess.run(
        ["kubectl", "--kubeconfig", api.kubeconfig, *args],
        # JSON, as the provider sends it: YAML written by PyYAML leaves strings such as 3e-3
        # unquoted, and kubectl's YAML reader takes those for numbers.
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": documents}) if documents is not None else None,
        capture_output=True, text=True, timeout=KUBECTL_TIMEOUT,
    )  # fmt: skip
    assert result.returncode == 0, f"kubectl {' '.join(args)} failed:\n{result.stderr}"
    return result


def apply(api: LocalApiServer, documents: list[dict[str, Any]], *flags: str) -> str:
    return apply_run(api, documents, *flags).stdout


def apply_run(api: LocalApiServer, documents: list[dict[str, Any]], *flags: str) -> subprocess.CompletedProcess:
    """Namespaces for real first (a server dry run of a namespaced object needs its namespace), then the rest."""
    namespaces = [doc for doc in documents if doc["kind"] == "Namespace"]
    if namespaces:
        kubectl(api, "apply", "-f", "-", documents=namespaces)
    return kubectl_run(api, "apply", *flags, "-f", "-", documents=[doc for doc in documents if doc["kind"] != "Namespace"])


def with_pod_owners(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The documents, and for a JobSet the Job that JobSet makes of it: PodSecurity admission checks
    the pod templates of the built-in kinds only, so the JobSet's pods are checked through that Job."""
    jobs = []
    for doc in documents:
        if doc["kind"] == "JobSet":
            (replicated,) = doc["spec"]["replicatedJobs"]
            name = f"{doc['metadata']['name']}-{replicated['name']}-0"
            jobs.append({"apiVersion": "batch/v1", "kind": "Job", **replicated["template"],
                         "metadata": {**replicated["template"]["metadata"], "name": name, "namespace": doc["metadata"]["namespace"]}})  # fmt: skip
    return documents + jobs


def stored_versions(api: LocalApiServer, documents: list[dict[str, Any]]) -> dict[str, str]:
    """resourceVersion of each object as the API server stores it, by kind/name."""
    versions = {}
    for doc in documents:
        meta = doc["metadata"]
        args = ["get", doc["kind"].lower(), meta["name"], "-o", "json"]
        stored = json.loads(kubectl(api, *args, *(["-n", meta["namespace"]] if "namespace" in meta else [])))
        versions[f"{doc['kind']}/{meta['name']}"] = stored["metadata"]["resourceVersion"]
    return versions


@pytest.mark.timeout(180)
@pytest.mark.parametrize("stack", ("dev", "prod"))
def test_the_api_server_admits_every_object(api, stack, kind):
    documents = objects(stack, 64, kind)
    out = apply(api, documents, "--dry-run=server")
    for doc in documents:
        if doc["kind"] != "Namespace":
            assert f"{doc['kind'].lower()}" in out.lower() and doc["metadata"]["name"] in out


@pytest.mark.timeout(180)
def test_the_prod_pods_meet_the_pod_security_level_their_namespace_enforces(api, kind):
    """Prod with InfiniBand: the RDMA request passes admission and the pods meet `restricted`
    (PodSecurity admission warns about a workload whose pods its namespace would refuse)."""
    documents = objects("prod", 8, kind)
    (namespace,) = [doc for doc in documents if doc["kind"] == "Namespace"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/warn"] == "restricted"
    workload = next(doc for doc in documents if doc["kind"] in ("StatefulSet", "Job", "JobSet"))
    assert "rdma/hca_shared_devices_a" in pod_template_of(workload)["spec"]["containers"][0]["resources"]["limits"]
    done = apply_run(api, with_pod_owners(documents), "--dry-run=server")
    assert "would violate PodSecurity" not in done.stderr, done.stderr
    # the same check does speak: a capability added to the trainer is warned about
    container = pod_template_of(workload)["spec"]["containers"][0]
    container["securityContext"]["capabilities"]["add"] = ["IPC_LOCK"]
    done = apply_run(api, with_pod_owners([workload]), "--dry-run=server")
    assert 'would violate PodSecurity "restricted:latest"' in done.stderr and "IPC_LOCK" in done.stderr, done.stderr


@pytest.mark.timeout(180)
def test_the_api_server_admits_the_escape_hatch(api, kind):
    """Sidecars, init containers, extra volumes and a template patch: valid, and still restricted."""
    from test_pod_escape_hatch import EVERYTHING

    evaluation = evaluate(stack_config_with("prod", pod=EVERYTHING, workload__kind=kind), stack="prod")
    assert evaluation.error is None, str(evaluation.error)
    done = apply_run(api, with_pod_owners(evaluation.kubernetes_manifests), "--dry-run=server")
    assert "would violate PodSecurity" not in done.stderr, done.stderr
    workload = next(doc for doc in evaluation.kubernetes_manifests if doc["kind"] in ("StatefulSet", "Job", "JobSet"))
    assert workload["metadata"]["name"] in done.stdout


@pytest.mark.timeout(180)
def test_scaling_a_deployed_world_changes_only_the_workload_and_its_budget(api):
    small, large = objects("dev", 2), objects("dev", 64)
    apply(api, small)
    before = stored_versions(api, small)
    apply(api, large)
    after = stored_versions(api, large)

    assert before.keys() == after.keys()
    changed = {key for key in before if before[key] != after[key]}
    # the budget's minAvailable is nodes - workload.maxUnavailable; no claim changes
    assert changed == {"StatefulSet/trainer", "PodDisruptionBudget/trainer"}
    statefulset = json.loads(kubectl(api, "get", "statefulset", "trainer", "-n", "ddp-dev", "-o", "json"))
    assert statefulset["spec"]["replicas"] == 64
    env = {var["name"]: var.get("value") for var in statefulset["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env[contract.NNODES.name] == env[contract.PET_NNODES.name] == "64"
    assert env[contract.WORLD_SIZE.name] == "64"
