"""The invariants of the whole stack, for each stack file, nodes = 1, 4, 64, 512 and every workload kind.

Each assertion reads what was registered (the mock monitor's view), not the program's own
helpers, so a helper that computed a wrong value could not hide it.
"""

from __future__ import annotations

import re

import pulumi
import pytest

import infra_harness as harness
from ddp_infra.components.training_world import WORLD_TYPE
from infra_harness import NODE_COUNTS, evaluated
from trainer import contract

STATEFULSET = "kubernetes:apps/v1:StatefulSet"
JOB = "kubernetes:batch/v1:Job"
JOBSET = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"
TYPES = {"statefulset": STATEFULSET, "job": JOB, "jobset": JOBSET}
SERVICE = "kubernetes:core/v1:Service"
PVC = "kubernetes:core/v1:PersistentVolumeClaim"
NAMESPACE = "kubernetes:core/v1:Namespace"
RECOMMENDED_LABELS = (
    "app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component",
    "app.kubernetes.io/part-of", "app.kubernetes.io/managed-by",
)  # fmt: skip


def stack_values(stack: str) -> dict:
    return harness.stack_file_config(stack)


def expected_procs(stack: str) -> int:
    values = stack_values(stack)
    gpus = int(values.get("gpusPerNode", 0))
    return int(values.get("procsPerNode", 0)) or gpus or 1


@pulumi.runtime.test
def test_workload_runs_one_pod_per_node(evaluation, stack, nodes, kind):
    spec = evaluation.workload.manifest["spec"]
    assert evaluation.workload.type == TYPES[kind]
    if kind == "statefulset":
        assert spec["replicas"] == nodes
        assert spec["podManagementPolicy"] == "Parallel"
    elif kind == "jobset":
        (replicated,) = spec["replicatedJobs"]
        job = replicated["template"]["spec"]
        assert replicated["replicas"] == 1 and replicated["name"] == contract.JOBSET_REPLICATED_JOB
        assert job["completionMode"] == "Indexed"
        assert job["completions"] == job["parallelism"] == nodes
        assert evaluation.pod_spec["restartPolicy"] == "Never"
        # any pod's failure fails the Job at once, and the JobSet restarts the whole world
        assert job["backoffLimit"] == 0
        policy = spec["failurePolicy"]
        # restarts of the whole world: the stack's workload.backoffLimit
        assert policy["maxRestarts"] == int(stack_values(stack).get("workload", {}).get("backoffLimit", 3))
        # the old world is gone (its SIGTERM checkpoint written) before the new one starts
        assert policy["restartStrategy"] == "BlockingRecreate"
        # a pod env that describes no world fails the Job by its pod failure policy, and the JobSet for good
        bad_env = {"containerName": "trainer", "operator": "In", "values": [contract.EXIT_BAD_ENV]}
        assert job["podFailurePolicy"]["rules"] == [{"action": "FailJob", "onExitCodes": bad_env}]
        assert policy["rules"] == [{"name": "pod_env_describes_no_world", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}]
        assert spec["successPolicy"] == {"operator": "All", "targetReplicatedJobs": [contract.JOBSET_REPLICATED_JOB]}
        assert spec["ttlSecondsAfterFinished"] > 0
    else:
        assert spec["completionMode"] == "Indexed"
        assert spec["completions"] == spec["parallelism"] == nodes
        assert spec["ttlSecondsAfterFinished"] > 0
        assert evaluation.pod_spec["restartPolicy"] == "Never"
        # a lost pod is replaced only once it is gone, so an index never runs twice
        assert spec["podReplacementPolicy"] == "Failed"
        rules = spec["podFailurePolicy"]["rules"]
        # an eviction, or a pod stopped by SIGTERM after its checkpoint, is replaced without counting as a failure
        assert {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]} in rules
        terminated = {"containerName": "trainer", "operator": "In", "values": [contract.EXIT_TERMINATED]}
        assert {"action": "Ignore", "onExitCodes": terminated} in rules
        # a pod env that describes no world fails the Job at once: retrying cannot fix it
        bad_env = {"containerName": "trainer", "operator": "In", "values": [contract.EXIT_BAD_ENV]}
        assert {"action": "FailJob", "onExitCodes": bad_env} in rules
        # a crash or a SIGKILL of one pod (the world re-forms) does not end the run
        assert spec["backoffLimit"] >= 1


@pulumi.runtime.test
def test_headless_service_selects_the_pods_and_names_the_workload(evaluation, kind):
    service = headless_service(evaluation).manifest
    workload = evaluation.workload.manifest
    selector = service["spec"]["selector"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    pod_labels = evaluation.pod_template["metadata"]["labels"]
    if kind == "statefulset":
        assert workload["spec"]["selector"]["matchLabels"] == selector
        assert workload["spec"]["serviceName"] == service["metadata"]["name"]
    else:
        assert evaluation.pod_spec["subdomain"] == service["metadata"]["name"]
    if kind == "jobset":
        # JobSet's own network names the stack's Service, which exists first, so it makes none of its own
        network = workload["spec"]["network"]
        assert network == {"enableDNSHostnames": True, "subdomain": service["metadata"]["name"], "publishNotReadyAddresses": True}
    assert selector and selector.items() <= pod_labels.items()
    policy = evaluation.named("kubernetes:networking.k8s.io/v1:NetworkPolicy", "ddp-guardrails-netpol").manifest
    assert policy["spec"]["podSelector"]["matchLabels"] == selector
    assert evaluation.one("kubernetes:policy/v1:PodDisruptionBudget").manifest["spec"]["selector"]["matchLabels"] == selector
    # the store's pod is none of the world's pods, whose Service, budget and policy select by these labels
    store_pod = evaluation.named("kubernetes:apps/v1:Deployment", "ddp-rendezvous-store").manifest["spec"]["template"]
    assert not selector.items() <= store_pod["metadata"]["labels"].items()


@pulumi.runtime.test
def test_the_disruption_budget_lets_a_drain_take_one_pod_at_a_time(evaluation, nodes):
    spec = evaluation.one("kubernetes:policy/v1:PodDisruptionBudget").manifest["spec"]
    # An evicted pod checkpoints on SIGTERM and the world re-forms when it is back: a drain need not
    # wait for the run to end, but taking several pods at once gains nothing. (minAvailable: a Job
    # has no scale subresource, which maxUnavailable needs.)
    assert spec["minAvailable"] == nodes - 1 and "maxUnavailable" not in spec
    # A crash-looping pod must not block a node drain or a node-pool upgrade.
    assert spec["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


@pulumi.runtime.test
def test_a_stack_can_refuse_every_voluntary_eviction():
    spec = harness.evaluated_with("dev", workload__maxUnavailable="0").one("kubernetes:policy/v1:PodDisruptionBudget").manifest["spec"]
    assert spec["minAvailable"] == int(harness.stack_file_config("dev")["nodes"])


@pulumi.runtime.test
def test_env_carries_the_contract_with_one_shape(evaluation, stack, nodes, kind):
    env = evaluation.env
    workload = evaluation.workload.manifest["metadata"]
    service = headless_service(evaluation).manifest["metadata"]
    procs = expected_procs(stack)

    assert set(contract.REQUIRED) <= env.keys()
    assert "RANK" not in env  # torchrun sets the global rank
    assert env["NNODES"]["value"] == str(nodes)
    assert env["NPROC_PER_NODE"]["value"] == str(procs)
    assert env["WORLD_SIZE"]["value"] == str(nodes * procs)
    # the short form: the pods' search path completes it on a cluster of any domain; pod 0's
    # hostname is <workload>-0, or under JobSet <jobset>-<replicated job>-<job index 0>-<pod index 0>
    pod0 = f"{workload['name']}-node-0-0" if kind == "jobset" else f"{workload['name']}-0"
    master = f"{pod0}.{service['name']}"
    assert env["MASTER_ADDR"]["value"] == master
    assert env["MASTER_PORT"]["value"] == str(service_port(evaluation))
    # the c10d store in a pod of its own (the default), behind its Service
    store = evaluation.named(SERVICE, "ddp-rendezvous-store").manifest["metadata"]["name"]
    assert env["PET_RDZV_ENDPOINT"]["value"] == env["RDZV_ENDPOINT"]["value"] == f"{store}:{service_port(evaluation)}"
    # tied to the world's shape: pods of a world of another size never meet this one's rendezvous
    assert env["RDZV_ID"]["value"] == f"ddp-infra-{stack}-{workload['name']}-{nodes}x{procs}"
    rank_path = {
        "statefulset": f"metadata.labels['{contract.POD_INDEX_LABEL}']",
        "job": f"metadata.annotations['{contract.JOB_COMPLETION_INDEX_ANNOTATION}']",
        "jobset": f"metadata.annotations['{contract.JOB_COMPLETION_INDEX_ANNOTATION}']",
    }[kind]
    assert env["NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"] == rank_path
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert env["WORKLOAD_KIND"]["value"] == kind


@pulumi.runtime.test
def test_torchrun_mirrors_equal_what_they_mirror(evaluation):
    env = evaluation.container["env"]
    defined: dict[str, str] = {}
    for var in env:
        if "value" in var:
            # A $(NAME) reference only resolves to a variable defined earlier in the list.
            for ref in re.findall(r"\$\((\w+)\)", var["value"]):
                assert ref in defined, f"{var['name']} refers to {ref} before it is defined"
        defined[var["name"]] = var.get("value", f"$({var['name']})")
    for mirror, original in contract.PET_MIRRORS.items():
        original_value = defined[original]
        assert defined[mirror] in (original_value, f"$({original})"), mirror


def headless_service(evaluation: harness.Evaluation) -> harness.Registered:
    return evaluation.named(SERVICE, "ddp-rendezvous")


def service_port(evaluation: harness.Evaluation) -> int:
    (port,) = headless_service(evaluation).manifest["spec"]["ports"]
    assert port["port"] == port["targetPort"]
    return port["port"]


@pulumi.runtime.test
def test_gpus_shm_and_volumes(evaluation, stack):
    values = stack_values(stack)
    gpus = int(values.get("gpusPerNode", 0))
    resources = evaluation.container["resources"]
    if gpus:
        assert resources["limits"]["nvidia.com/gpu"] == str(gpus)
        assert resources["requests"]["nvidia.com/gpu"] == str(gpus)
    else:
        assert "nvidia.com/gpu" not in resources.get("limits", {})

    volumes = {volume["name"]: volume for volume in evaluation.pod_spec["volumes"]}
    mounts = {mount["mountPath"]: mount["name"] for mount in evaluation.container["volumeMounts"]}
    shm = volumes[mounts[contract.SHM_MOUNT]]
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": values.get("shmSize", "1Gi")}

    claims = {pvc.manifest["metadata"]["name"] for pvc in evaluation.of_type(PVC)}
    expected_mounts = [contract.DATA_MOUNT, contract.OUT_MOUNT]
    if "models" in values.get("storage", {}):
        expected_mounts.append(contract.MODELS_MOUNT)
    else:
        assert contract.MODELS_MOUNT not in mounts
    for path in expected_mounts:
        assert volumes[mounts[path]]["persistentVolumeClaim"]["claimName"] in claims


@pulumi.runtime.test
def test_pods_run_restricted(evaluation, stack):
    pod, container = evaluation.pod_spec, evaluation.container
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == pod["securityContext"]["runAsGroup"] == 1000
    assert pod["securityContext"]["fsGroup"] == 1000
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    context = container["securityContext"]
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert context["capabilities"]["drop"] == ["ALL"]
    # a uid-1000 process gets no added capability: one would only cost the namespace its restricted level
    assert "add" not in context["capabilities"]
    namespace = evaluation.one("kubernetes:core/v1:Namespace").manifest["metadata"]["labels"]
    assert namespace["pod-security.kubernetes.io/enforce"] == "restricted"
    mounts = {mount["mountPath"] for mount in container["volumeMounts"]}
    assert "/tmp" in mounts and {"name": "HOME", "value": "/tmp"} in container["env"]
    account = evaluation.one("kubernetes:core/v1:ServiceAccount").manifest
    assert account["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == account["metadata"]["name"]


@pulumi.runtime.test
def test_outputs_describe_the_world(evaluation, stack, nodes, kind):
    outputs = evaluation.outputs
    env = evaluation.env
    workload = evaluation.workload.manifest["metadata"]
    assert outputs["nodes"] == nodes
    assert outputs["worldSize"] == int(env["WORLD_SIZE"]["value"])
    assert outputs["masterAddress"] == env["MASTER_ADDR"]["value"]
    assert outputs["workloadName"] == workload["name"]
    assert outputs["namespace"] == workload["namespace"]
    assert f"-n {workload['namespace']}" in outputs["kubectlWatchPods"]
    assert outputs["kubectlWatchPods"].endswith(" -w")
    assert "logs -f" in outputs["kubectlFollowRank0"]
    rank0 = f"{workload['name']}-0" if kind == "statefulset" else f"{contract.JOB_COMPLETION_INDEX_ANNOTATION}=0"
    assert rank0 in outputs["kubectlFollowRank0"]
    # where the run stands: `kubectl get job` prints Running, Complete or Failed
    assert outputs["kubectlRunStatus"] == f"kubectl -n {workload['namespace']} get {kind} {workload['name']}"


@pulumi.runtime.test
def test_every_object_is_wired_and_labelled(evaluation):
    providers = {p.name: p for p in evaluation.of_type("pulumi:providers:kubernetes")}
    components = {r.urn: r for r in evaluation.registered if not r.custom}
    (world,) = [r for r in components.values() if r.type == WORLD_TYPE]
    assert all(r.type.startswith("ddp-infra:training:") for r in components.values() if r is not world)
    for resource in evaluation.registered:
        if not resource.type.startswith("kubernetes:"):
            continue
        # What Pulumi leaves in the cluster on delete (claims, their namespace) is taken over by the
        # next `pulumi up`; everything else is created, so one already there is an error, not a takeover.
        # A namespace that is not retained has a provider of its own in render mode (providers.namespace_provider).
        if resource.retain_on_delete:
            expected = providers["ddp-k8s-retained"]
        elif resource.type == NAMESPACE and "ddp-k8s-namespace" in providers:
            expected = providers["ddp-k8s-namespace"]
        else:
            expected = providers["ddp-k8s"]
        assert resource.provider.startswith(expected.urn), resource.name
        # (provider config reaches the provider as strings)
        assert expected.inputs.get("enableServerSideApply") == ("true" if resource.retain_on_delete else "false")
        assert resource.parent in components, f"{resource.name} is not parented to a component"
        labels = resource.manifest["metadata"]["labels"]
        assert {"app.kubernetes.io/part-of", "app.kubernetes.io/managed-by"} <= labels.keys()
        if resource.type not in (PVC, NAMESPACE):
            assert set(RECOMMENDED_LABELS) <= labels.keys(), resource.name
    pod_labels = evaluation.pod_template["metadata"]["labels"]
    assert set(RECOMMENDED_LABELS) <= pod_labels.keys()
    namespace = evaluation.one("kubernetes:core/v1:Namespace")
    for resource in evaluation.registered:
        if resource.type.startswith("kubernetes:") and resource is not namespace:
            assert namespace.urn in resource.dependencies, f"{resource.name} does not wait for its namespace"


@pulumi.runtime.test
def test_every_manifest_is_valid_kubernetes(evaluation):
    for manifest in evaluation.kubernetes_manifests:
        harness.validate_manifest(manifest)


@pulumi.runtime.test
def test_pods_start_only_after_what_they_mount_and_join(evaluation):
    needed = [headless_service(evaluation), *evaluation.of_type(PVC), evaluation.one("kubernetes:core/v1:ServiceAccount")]
    assert {r.urn for r in needed} <= set(evaluation.workload.dependencies)
    # the store's pod starts beside the world's, whose preflight waits for it
    store = evaluation.named("kubernetes:apps/v1:Deployment", "ddp-rendezvous-store")
    assert store.urn not in evaluation.workload.dependencies


# --- what must not change with nodes --------------------------------------------------------------

def shape(evaluation: harness.Evaluation) -> list[tuple[str, str, str]]:
    return sorted((r.type, r.name, r.parent) for r in evaluation.registered)


def claims(evaluation: harness.Evaluation) -> list[tuple]:
    return sorted(
        (r.name, repr(r.inputs), r.protect, r.retain_on_delete) for r in evaluation.of_type(PVC)
    )


@pulumi.runtime.test
def test_same_resources_and_identical_claims_whatever_nodes(stack, kind):
    evaluations = [evaluated(stack, nodes, kind) for nodes in NODE_COUNTS]
    reference = evaluations[0]
    assert claims(reference), "the stack creates claims"
    for other in evaluations[1:]:
        assert shape(other) == shape(reference)
        assert claims(other) == claims(reference)


@pytest.mark.parametrize(
    "pod_setting, value",
    [
        ("image.name", "registry.example.com/other:2"),
        ("resources.requests.cpu", "3"),
        ("shmSize", "2Gi"),
        ("gpusPerNode", "4"),
        ("workload.kind", "job"),
        ("workload.kind", "jobset"),
        ("workload.name", "renamed"),
        ("workload.waitFor", "running"),
        ("rendezvous.port", "29600"),
        ("labels", {"team": "nlp"}),
        ("env", {"EXTRA": "1"}),
        ("scheduling.nodeSelector", {"pool": "gpu"}),
        ("pod", {"runtimeClassName": "nvidia", "sidecars": [{"name": "shipper", "image": "fluent/fluent-bit:3.2"}]}),
    ],
)
@pulumi.runtime.test
def test_no_pod_setting_touches_a_claim(pod_setting, value):
    values = harness.stack_file_config("prod")
    changed = harness.evaluate(harness.with_path(values, pod_setting, value), stack="prod")
    assert changed.error is None, str(changed.error)
    assert claims(changed) == claims(evaluated("prod", int(values["nodes"])))


@pulumi.runtime.test
@pytest.mark.parametrize("stack", harness.STACKS)
def test_up_waits_for_a_claim_to_have_a_phase_not_to_be_pending(stack):
    """An adopted claim (destroy, then up) is already Bound; the provider's own check would wait
    for Pending until it times out. Every claim says what `pulumi up` waits for instead."""
    for claim in evaluated(stack, 2).of_type(PVC):
        assert claim.manifest["metadata"]["annotations"] == {"pulumi.com/waitFor": "jsonpath={.status.phase}"}


def test_claims_are_retained_and_prod_outputs_protected():
    prod = {r.name: r for r in evaluated("prod", 8).of_type(PVC)}
    assert prod["ddp-storage-outputs"].protect and prod["ddp-storage-outputs"].retain_on_delete
    assert all(claim.retain_on_delete for claim in prod.values())
    namespace = evaluated("prod", 8).one("kubernetes:core/v1:Namespace")
    # Deleting the namespace would delete its claims: it is kept and protected with them.
    assert namespace.protect and namespace.retain_on_delete
    assert not any(claim.protect for claim in evaluated("dev", 4).of_type(PVC))


@pulumi.runtime.test
def test_existing_claims_and_namespace_are_used_not_managed():
    values = harness.stack_file_config("prod")
    values = harness.with_path(values, "namespace", {"name": "shared", "create": False})
    values = harness.with_path(values, "storage", {"datasets": {"claimName": "corpus", "create": False}})
    evaluation = harness.evaluate(values, stack="prod")
    assert evaluation.error is None, str(evaluation.error)
    assert not evaluation.of_type("kubernetes:core/v1:Namespace")
    assert [r.manifest["metadata"]["name"] for r in evaluation.of_type(PVC)] == ["outputs-pvc"]
    volumes = {v["name"]: v for v in evaluation.pod_spec["volumes"]}
    assert volumes["datasets"]["persistentVolumeClaim"]["claimName"] == "corpus"
    assert evaluation.workload.manifest["metadata"]["namespace"] == "shared"


@pytest.mark.parametrize("wait", ["none", "running"])
@pytest.mark.parametrize("kind", contract.WORKLOAD_KINDS)
@pulumi.runtime.test
def test_the_provider_waits_only_until_the_controller_has_taken_the_workload(wait, kind):
    """`up` waits for the world itself (ddp_infra/world_wait.py), whatever workload.waitFor says: a
    Job's own await would last until it completes, and restarts its timeout at every event."""
    values = harness.with_path(harness.stack_file_config("dev"), "workload.waitFor", wait)
    values = harness.with_path(values, "workload.kind", kind)
    workload = harness.evaluate(values).workload
    annotations = workload.manifest["metadata"].get("annotations", {})
    # skipAwait would also skip waiting for the old world's deletion when the workload is replaced
    assert "pulumi.com/skipAwait" not in annotations
    started = {
        "job": "jsonpath={.status.startTime}",
        "statefulset": "jsonpath={.status.observedGeneration}",
        "jobset": "jsonpath={.status.replicatedJobsStatus}",
    }
    assert annotations["pulumi.com/waitFor"] == started[kind]
    assert workload.custom_timeouts == {}


@pulumi.runtime.test
def test_a_changed_workload_is_replaced_whole_after_the_old_world_is_gone(kind):
    """Any spec change (a resize, an image, the run's args) stops the old world before the new one starts.

    Rolling one pod at a time would mix pods of two shapes; creating first would put two worlds on
    one /out/<run>. The provider deletes in the foreground by default and waits for the delete
    unless skipAwait is set, which the test above rules out. A Job that joins or leaves the Workload
    of the Kubernetes scheduler's gang (its owner) is replaced too: the Job controller gangs only a
    Job that never started.
    """
    workload = evaluated("dev", 2, kind).workload
    assert workload.delete_before_replace is True
    assert workload.replace_on_changes == ["spec", "metadata.ownerReferences"]


@pulumi.runtime.test
def test_a_kind_switch_replaces_the_workload_after_the_old_kind_is_gone(kind):
    """Without an alias the new kind would be a new resource: created first, the old one deleted at
    the end of the update, two worlds on one /out/<run> in between. With it, a switch is a replace."""
    others = {TYPES[other] for other in TYPES if other != kind}
    workload = evaluated("dev", 2, kind).workload
    assert others <= set(workload.alias_types)
    assert workload.delete_before_replace is True


def test_the_default_workload_runs_to_completion():
    assert harness.evaluate(harness.stack_file_config("dev")).workload.type == JOB

