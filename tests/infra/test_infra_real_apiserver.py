"""The program's objects against a real Kubernetes API server (etcd + kube-apiserver on loopback,
built by toolchain/build.sh): admission, defaulting and validation as a cluster does them, and
what a scale-out really changes in the stored objects. A JobSet is checked against the schema of
JobSet's own CRD (from its module, kept by build.sh beside the controller), a Volcano PodGroup
against Volcano's, and a Kueue-queued stack's objects beside Kueue's own CRDs.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any, Iterable

import pytest

from infra_harness import evaluate, evaluated, evaluated_with, pod_template_of, stack_config_with
from refusals import skip_if_refused_else_fail
from waiting import wait_for
from ddp_infra import cluster_apis, gang
from ddp_infra import config as stack_config
from ddp_infra.config import StackConfig
from ddp_infra.names import WORKLOAD_API_ALPHA, WORKLOAD_API_BETA
from toolchain.apiserver import LocalApiServer, find_tool, tool_dir
from toolchain.addons.controller_addon import ControllerAddOn
from toolchain.addons.jobset import JOBSET
from toolchain.addons import volcano
from toolchain.addons.kueue import KUEUE
from trainer import contract

KUBECTL_TIMEOUT = 60


@pytest.fixture(scope="module")
def api():
    with LocalApiServer() as server:
        yield server


def install_crds(api: LocalApiServer, addon: ControllerAddOn) -> None:
    """An add-on's CRDs, from the install build.sh keeps beside its controller (a skip without it)."""
    try:
        manager = find_tool(addon.manager, tool_dir())
    except FileNotFoundError as missing:
        skip_if_refused_else_fail(addon.name, tool_dir(), f"{addon.name}'s CRDs come with its controller, which the toolchain lacks: {missing}")
    crds = [doc for doc in addon.api_objects(addon.install_manifests(manager)) if doc["kind"] == "CustomResourceDefinition"]
    kubectl(api, "apply", "--server-side", "-f", "-", documents=crds)
    wait_established(api, addon.crds)


def wait_established(api: LocalApiServer, crds: Iterable[str]) -> None:
    """Polled and read as JSON, not `kubectl wait --for=condition` nor a jsonpath filter: both fail
    at once on a CRD the API server has not yet given any condition (seen in make test)."""
    def established(crd: str) -> bool:
        conditions = json.loads(kubectl(api, "get", f"crd/{crd}", "-o", "json")).get("status", {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    for crd in crds:
        wait_for(lambda: established(crd), KUBECTL_TIMEOUT, f"CRD {crd} Established", interval=0.2)


@pytest.fixture(params=contract.WORKLOAD_KINDS)
def kind(request, api) -> str:
    """Each workload kind; for jobset, JobSet's CRD installed first (a skip without it)."""
    if request.param == contract.JOBSET:
        install_crds(api, JOBSET)
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
@pytest.mark.parametrize("elastic_kind", (contract.INDEXED_JOB, contract.JOBSET))
def test_the_api_server_admits_an_elastic_world(api, elastic_kind):
    """The Job's successPolicy (a pod that succeeds ends it) and the JobSet's Job of the plain Job's failure handling."""
    documents = objects("prod", "32:64", elastic_kind)
    out = apply(api, with_pod_owners(documents), "--dry-run=server")
    workload = next(doc for doc in documents if doc["kind"] in ("Job", "JobSet"))
    assert workload["metadata"]["name"] in out


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
    from test_infra_pod_escape_hatch import EVERYTHING

    evaluation = evaluated_with("prod", pod=EVERYTHING, workload__kind=kind)
    done = apply_run(api, with_pod_owners(evaluation.kubernetes_manifests), "--dry-run=server")
    assert "would violate PodSecurity" not in done.stderr, done.stderr
    workload = next(doc for doc in evaluation.kubernetes_manifests if doc["kind"] in ("StatefulSet", "Job", "JobSet"))
    assert workload["metadata"]["name"] in done.stdout


@pytest.mark.timeout(180)
def test_the_api_server_admits_values_at_the_edge_of_the_config(api):
    """The longest names, a 63-character label value, 1.5Gi and 1E, a 1k device count, ...: what the
    config accepts at its edges, the API server takes too, without a warning (it warns about a
    fraction of a byte)."""
    from test_infra_config_errors import AT_THE_EDGE, malformed

    evaluation = evaluate(malformed(AT_THE_EDGE), secret_keys=("secretEnv",))
    assert evaluation.error is None, str(evaluation.error)
    done = apply_run(api, evaluation.kubernetes_manifests, "--dry-run=server")
    assert "Warning" not in done.stderr, done.stderr
    for doc in evaluation.kubernetes_manifests:
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["name"] in done.stdout


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


@pytest.fixture(scope="module")
def volcano_crds(api) -> None:
    """Volcano's PodGroup and Queue CRDs, which build.sh keeps from Volcano's module (a skip without them)."""
    crds = tool_dir() / "volcano-crds"
    if not crds.is_dir():
        skip_if_refused_else_fail(volcano.VOLCANO.name, tool_dir(), f"Volcano's CRDs are not in the toolchain ({crds})")
    documents = volcano.crds(crds)
    kubectl(api, "apply", "--server-side", "-f", "-", documents=documents)
    wait_established(api, [doc["metadata"]["name"] for doc in documents])


@pytest.mark.timeout(180)
def test_a_volcano_stacks_pod_group_meets_volcanos_schema(api, kind, volcano_crds):
    evaluation = evaluated_with("prod", workload__kind=kind, scheduling__gang={"scheduler": "volcano", "queue": "research"},
                                scheduling__priorityClassName="training-high", pod={"sidecars": [{"name": "shipper", "image": "fluent-bit"}]})  # fmt: skip
    documents = evaluation.kubernetes_manifests
    (group,) = [doc for doc in documents if doc["kind"] == "PodGroup"]
    # strict: a field Volcano's schema does not know is an error, not dropped in silence
    done = apply_run(api, with_pod_owners(documents), "--dry-run=server", "--validate=strict")
    assert f"podgroup.scheduling.volcano.sh/{group['metadata']['name']} created (server dry run)" in done.stdout, done.stdout
    # the same check does speak: the schema is Volcano's, not a permissive one
    group["spec"]["minMember"] = "all"
    refused = subprocess.run(["kubectl", "--kubeconfig", api.kubeconfig, "apply", "--dry-run=server", "-f", "-"],
                             input=json.dumps(group), capture_output=True, text=True, timeout=KUBECTL_TIMEOUT)  # fmt: skip
    assert refused.returncode != 0 and "minMember" in refused.stderr, refused.stderr


@pytest.mark.timeout(180)
@pytest.mark.parametrize("workload_kind", [contract.INDEXED_JOB, contract.JOBSET])
def test_a_kueue_stacks_workload_is_admitted_suspended_beside_kueues_crds(api, workload_kind):
    """Kueue's CRDs installed (its webhooks are the cluster test's): the queued workload is valid and
    stored suspended, with its queue's label."""
    install_crds(api, KUEUE)
    if workload_kind == contract.JOBSET:
        install_crds(api, JOBSET)
    evaluation = evaluated_with("prod", workload__kind=workload_kind, scheduling__gang={"scheduler": "kueue", "queue": "team-a"})
    documents = evaluation.kubernetes_manifests
    workload = next(doc for doc in documents if doc["kind"] in ("Job", "JobSet"))
    done = apply_run(api, with_pod_owners(documents), "--dry-run=server", "-o", "json")
    stored = [item for item in json.loads(done.stdout)["items"] if item["kind"] == workload["kind"]]
    assert stored and stored[0]["spec"]["suspend"] is True
    assert stored[0]["metadata"]["labels"][gang.KUEUE_QUEUE_LABEL] == "team-a"


def kubernetes_gang(**changes: Any) -> StackConfig:
    return stack_config.parse(stack_config_with("prod", scheduling__gang={"scheduler": "kubernetes"}, **changes))


@pytest.mark.timeout(240)
def test_the_world_is_written_for_the_workload_api_version_the_api_server_serves(api, monkeypatch):
    """Kubernetes 1.37 (the local cluster's) serves scheduling.k8s.io/v1beta1, 1.36 (its API server
    alone) v1alpha2, and an API server without the gates neither version: refused with what each
    release needs turned on. On v1alpha2 an elastic world or spares are refused (its Job controller's
    gang is every pod); on v1beta1 both are written."""
    # these configs name no cluster to render for; the program's other guard, Pulumi's mocks, is not
    # this test's: a mocked test earlier in the same process leaves its monitor set
    monkeypatch.setattr(cluster_apis, "needs_no_cluster", lambda kubernetes: False)
    elastic_and_spares = ((kubernetes_gang(nodes="2:4"), "an elastic world, nodes 2:4"), (kubernetes_gang(workload__sparePods=1), "workload.sparePods 1"))
    monkeypatch.setenv("KUBECONFIG", api.kubeconfig)
    for config in (kubernetes_gang(), *(config for config, _ in elastic_and_spares)):
        assert cluster_apis.require_cluster_apis(config) == WORKLOAD_API_BETA
    with LocalApiServer(previous_release=True) as previous:
        monkeypatch.setenv("KUBECONFIG", previous.kubeconfig)
        assert cluster_apis.require_cluster_apis(kubernetes_gang()) == WORKLOAD_API_ALPHA
        for config, what in elastic_and_spares:
            with pytest.raises(cluster_apis.ClusterLacksApi) as refused:
                cluster_apis.require_cluster_apis(config)
            assert f"scheduling.gang.scheduler kubernetes with {what} needs {WORKLOAD_API_BETA}" in str(refused.value)
            assert f"this cluster serves {WORKLOAD_API_ALPHA}" in str(refused.value)
    with LocalApiServer(workload_api=False) as without:
        monkeypatch.setenv("KUBECONFIG", without.kubeconfig)
        with pytest.raises(cluster_apis.ClusterLacksApi) as refused:
            cluster_apis.require_cluster_apis(kubernetes_gang())
        message = str(refused.value)
        assert (f"it lacks {WORKLOAD_API_BETA} workloads, podgroups; {WORKLOAD_API_ALPHA} workloads, podgroups" in message), message
        for needed in (f"--runtime-config={WORKLOAD_API_BETA}=true", f"--runtime-config={WORKLOAD_API_ALPHA}=true",
                       "GenericWorkload", "WorkloadWithJob", "GangScheduling"):  # fmt: skip
            assert needed in message, message


@pytest.mark.timeout(120)
def test_the_api_server_takes_a_resized_gang_in_place_and_refuses_a_new_controller(api):
    """Kubernetes 1.37's API server takes the Workload the stack writes for a world of 8 as a Job,
    then the same for 16 (its minCount changed in place), and refuses it as a JobSet's (its
    controllerRef cannot change): why only a kind switch replaces the Workload
    (components/trainer.py, test_infra_gang_admission.py)."""
    def the_workload(nodes: int, kind: str = contract.INDEXED_JOB) -> dict[str, Any]:
        evaluation = evaluated_with("prod", nodes=nodes, workload__kind=kind, scheduling__gang={"scheduler": "kubernetes"})
        return evaluation.one(f"kubernetes:{WORKLOAD_API_BETA}:Workload").manifest

    first = the_workload(8)
    name, namespace = first["metadata"]["name"], first["metadata"]["namespace"]
    apply(api, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}, first])
    apply(api, [the_workload(16)])
    stored = json.loads(kubectl(api, "get", "workloads.scheduling.k8s.io", name, "-n", namespace, "-o", "json"))
    assert stored["spec"]["podGroupTemplates"][0]["schedulingPolicy"] == {"gang": {"minCount": 16}}
    switched = subprocess.run(["kubectl", "--kubeconfig", api.kubeconfig, "apply", "-f", "-"], input=json.dumps(the_workload(16, contract.JOBSET)),
                              capture_output=True, text=True, timeout=KUBECTL_TIMEOUT)  # fmt: skip
    assert switched.returncode != 0, switched.stdout
    assert "spec.controllerRef" in switched.stderr and "field is immutable" in switched.stderr, switched.stderr
