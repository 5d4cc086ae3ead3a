"""Deploying the dev stack to the local cluster and watching what the cluster does.

With a Pulumi engine on PATH, the real `pulumi up` and `pulumi destroy` deploy it (EngineStack).
Without one, the program's own objects, evaluated under mocks from the committed stack file (see
infra_harness), are applied with kubectl the way pulumi-kubernetes applies them (DevStack): in
the order it creates them (the namespace, then what the workload depends on, then the workload),
with its create, update, replace and delete for each.
"""

from __future__ import annotations

import copy
import json
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from ddp_infra.claim_changes import ClaimChangeRefused
from ddp_infra.workload import pod_template_of
from infra_harness import DELETE, Evaluation, Registered, evaluate, stack_config_with, stack_file_config
from pulumi_project import PROJECT, PulumiProject
from trainer import contract
from toolchain.cluster import LocalCluster

WORKLOAD_KINDS = ("StatefulSet", "Job", "JobSet")

# The dev stack as committed: what the tests deploy and where they look for it.
DEV = stack_file_config("dev")
NAMESPACE = DEV["namespace"]["name"]
RUN = DEV["run"]["name"]
WORKLOAD = "trainer"
SERVICE = f"{WORKLOAD}-rdzv"
NODES = int(DEV["nodes"])
MASTER = f"{WORKLOAD}-0.{SERVICE}"
TEST_DOMAIN = "ddp-infra.test"  # the test cluster's domain
# 3 epochs of 32 steps of a 1M-parameter MLP in a world of 2, a checkpoint every 8: long enough to
# lose pods (three times) after a checkpoint, short enough to finish.
CHECKPOINT_EVERY = 8
DISRUPTED_RUN = [
    "-m", "trainer.train", "smoke", "--epochs", "3", "--batch", "256", "--samples", "16384", "--features", "512",
    "--hidden", "2048", "--classes", "4", "--lr", "1e-3", "--seed", "7", "--checkpoint-every", str(CHECKPOINT_EVERY),
    "--log-every", "8", "--pg-timeout", "60",
]  # fmt: skip
# The smoke task made long enough to look inside its pods while it trains.
LONG_RUN = ["-m", "trainer.train", "smoke", "--epochs", "500", "--batch", "256", "--samples", "65536",
            "--features", "128", "--classes", "4", "--lr", "3e-3", "--seed", "42", "--checkpoint-every", "0"]  # fmt: skip


def _key(resource: Registered) -> tuple[str, str, str]:
    metadata = resource.manifest["metadata"]
    return resource.manifest["kind"], metadata.get("namespace", ""), metadata["name"]


def _creation_order(resources: list[Registered]) -> list[Registered]:
    rank = {"Namespace": 0, **{kind: 2 for kind in WORKLOAD_KINDS}}
    return sorted(resources, key=lambda r: rank.get(r.manifest["kind"], 1))


class DevStack:
    """The dev stack's objects applied the way pulumi-kubernetes does, for a cluster test without an engine.

    - create: `kubectl create` (an object already there is AlreadyExists), except through the
      provider that adopts retained objects (`upsertExistingObjects`): server-side apply;
    - update: server-side apply, as the provider's default, taking over the fields its create
      set (the provider moves them from the create's field manager to its own);
    - replace (a field of `replaceOnChanges` changed, `deleteBeforeReplace`): a foreground delete,
      waited for as the provider waits without skipAwait, then a create;
    - destroy: deletes in reverse creation order, each waited for, leaving the retained objects.
    Objects are sent as JSON, as the provider sends them (YAML would make numbers of strings like 3e-3).
    """

    def __init__(self, cluster: LocalCluster):
        self.cluster = cluster
        self.deployed: dict[tuple[str, str, str], Registered] = {}
        self.outputs: dict[str, Any] = {}

    def up(self, **overrides: Any) -> list[dict[str, Any]]:
        evaluation = _evaluated(stack_config_with("dev", **overrides), self.outputs)
        self.outputs = evaluation.outputs
        wanted = _kubernetes_objects(evaluation)
        for resource in wanted:
            old = self.deployed.pop(_key(resource), None) or self._aliased(resource)
            if old is None:
                self._create(resource)
            elif old.type != resource.type or any(
                old.manifest.get(field) != resource.manifest.get(field) for field in resource.replace_on_changes
            ):
                assert resource.delete_before_replace, f"{_key(resource)} would be created beside its old self"
                self._delete(old)
                self._create(resource)
            elif old.manifest != resource.manifest:
                self._send("apply", "--server-side", "--field-manager=pulumi-kubernetes", "--force-conflicts", resource=resource)
            self.deployed[_key(resource)] = resource
        # What the program no longer registers is deleted at the end of the update, as the engine does.
        for key in [key for key in self.deployed if key not in {_key(r) for r in wanted}][::-1]:
            self._delete(self.deployed.pop(key))
        return [r.manifest for r in wanted]

    def _aliased(self, resource: Registered) -> Registered | None:
        """The deployed resource that `resource` names as an alias (same name, another type), taken over."""
        for key, old in list(self.deployed.items()):
            if old.name == resource.name and old.type in resource.alias_types:
                return self.deployed.pop(key)
        return None

    def destroy(self) -> None:
        for resource in _creation_order(list(self.deployed.values()))[::-1]:
            if not resource.retain_on_delete:
                self._delete(resource)
        self.deployed.clear()
        self.outputs = {}  # a destroyed stack has no outputs

    def _create(self, resource: Registered) -> None:
        if resource.retain_on_delete:  # the retained objects' provider upserts
            self._send("apply", "--server-side", "--field-manager=pulumi-kubernetes", resource=resource)
        else:
            self._send("create", resource=resource)

    def _send(self, *verb: str, resource: Registered) -> None:
        self.cluster.kubectl(*verb, "-f", "-", input=json.dumps(resource.manifest))

    def _delete(self, resource: Registered, timeout: float = 300) -> None:
        kind, namespace, name = _key(resource)
        where = ["-n", namespace] if namespace else []
        self.cluster.kubectl("delete", kind.lower(), name, *where, "--cascade=foreground", "--wait=true",
                             f"--timeout={int(timeout)}s", timeout=timeout + 30)  # fmt: skip


def pause_pod_resources(cpu: str) -> dict[str, str]:
    """Stack overrides for pods that run the pause binary: `cpu` each and little memory, so that
    a test's queue or quota, not the node, is what holds a world back."""
    return {"resources__requests__cpu": cpu, "resources__requests__memory": "16Mi", "resources__limits__memory": "64Mi",
            "shmSize": "16Mi"}  # fmt: skip


class PauseStack(DevStack):
    """The dev stack with the trainer container running the pause binary: a controller's own
    behaviour, without the trainer image. The pause process exits 0 on SIGTERM, so only a kill
    fails a pod."""

    def _send(self, *verb: str, resource: Registered) -> None:
        manifest = copy.deepcopy(resource.manifest)
        if manifest["kind"] in WORKLOAD_KINDS:
            trainer = pod_template_of(manifest)["spec"]["containers"][0]
            trainer.update(image=self.cluster.images["pause"], command=["/pause"], args=[])
        self.cluster.kubectl(*verb, "-f", "-", input=json.dumps(manifest))


def _evaluated(values: dict[str, Any], previous_outputs: dict[str, Any]) -> Evaluation:
    """The program's evaluation after a deployment that left `previous_outputs`; its refusal raised."""
    evaluation = evaluate(values, previous_outputs=previous_outputs)
    if evaluation.error is not None:
        raise evaluation.error
    return evaluation


def _kubernetes_objects(evaluation: Evaluation) -> list[Registered]:
    return _creation_order([r for r in evaluation.registered if r.custom and r.type.startswith("kubernetes:")])


class EngineStack:
    """The dev stack deployed to the cluster by the real `pulumi up` and `pulumi destroy`, from a copy
    of the project with its own state backend (tests/engine/pulumi_project.py). Each `up` writes the
    committed stack file's config with the test's changes and without renderDir, so the provider
    applies to the cluster that KUBECONFIG names."""

    def __init__(self, cluster: LocalCluster, root: Path):
        self.project = PulumiProject(root)  # a skip when no engine is on PATH
        Path(self.project.env["KUBECONFIG"]).symlink_to(cluster.kubeconfig)
        self.project.init_stack("dev")
        self.outputs: dict[str, Any] = {}

    def up(self, **overrides: Any) -> list[dict[str, Any]]:
        values = stack_config_with("dev", kubernetes__renderDir=DELETE, **overrides)
        stack_file = self.project.stack_file("dev")
        document = yaml.safe_load(stack_file.read_text())
        document["config"] = {f"{PROJECT}:{key}": value for key, value in values.items()}
        # Every scalar quoted: the engine reads YAML 1.2, where an unquoted 1e-3 is a number.
        stack_file.write_text(yaml.safe_dump(document, default_style='"'))
        result = self.project.run("up", "--stack", "dev", "--yes", "--skip-preview", "--color", "never", check=False)
        if result.returncode != 0:
            if "refused: a claim" in result.output:
                raise ClaimChangeRefused(result.output)
            raise AssertionError(f"pulumi up failed:\n{result.describe()}")
        self.outputs = json.loads(self.project.stack_outputs("dev").stdout)
        # What the provider applied: the program's objects, as the mock evaluation of the same config shows them.
        return [r.manifest for r in _kubernetes_objects(evaluate(values))]

    def destroy(self) -> None:
        self.project.run("destroy", "--stack", "dev", "--yes", "--skip-preview", "--color", "never")
        self.outputs = {}


def deployed_stack(cluster: LocalCluster, root: Path) -> EngineStack | DevStack:
    """EngineStack where an engine is on PATH, else DevStack."""
    try:
        return EngineStack(cluster, root)
    except pytest.skip.Exception as no_engine:
        print(f"\n[dev stack] applied as the provider would (no engine: {no_engine.msg})")
        return DevStack(cluster)


def delete_namespace(cluster: LocalCluster, namespace: str, timeout: float = 240) -> None:
    cluster.kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=true", f"--timeout={int(timeout)}s",
                    timeout=timeout + 30)


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 1.0) -> Any:
    """Polls until predicate() returns something truthy, which it returns; bounded."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            result = predicate()
            if result:
                return result
            last = result
        except Exception as error:  # noqa: BLE001 - shown if it never succeeds
            last = error
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


def get(cluster: LocalCluster, kind: str, name: str, namespace: str) -> dict[str, Any]:
    return json.loads(cluster.kubectl("get", kind, name, "-n", namespace, "-o", "json").stdout)


def pods(cluster: LocalCluster, namespace: str) -> dict[str, dict[str, Any]]:
    items = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]
    return {pod["metadata"]["name"]: pod for pod in items}


def running(pod: dict[str, Any]) -> bool:
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return pod["status"].get("phase") == "Running" and all("running" in s.get("state", {}) for s in statuses)


def world_pods(cluster: LocalCluster, namespace: str = NAMESPACE) -> dict[int, dict[str, Any]]:
    """The world's pods by pod index (a Job's pods carry a random suffix), of either workload kind,
    leaving out those being deleted or failed, which the Job replaces."""
    found: dict[int, dict[str, Any]] = {}
    for pod in sorted(pods(cluster, namespace).values(), key=lambda p: p["metadata"]["creationTimestamp"]):
        metadata = pod["metadata"]
        index = metadata.get("annotations", {}).get(contract.JOB_COMPLETION_INDEX_ANNOTATION,
                                                    metadata.get("labels", {}).get(contract.POD_INDEX_LABEL))  # fmt: skip
        if index is not None and "deletionTimestamp" not in metadata and pod["status"].get("phase") != "Failed":
            found[int(index)] = pod
    return found


def evict(cluster: LocalCluster, pod: str, namespace: str = NAMESPACE) -> subprocess.CompletedProcess:
    """POSTs an Eviction for the pod, as `kubectl drain` does; returns kubectl's result."""
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": namespace}}
    return cluster.kubectl("create", "--raw", f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction", "-f", "-",
                           input=json.dumps(eviction), check=False)  # fmt: skip


def pod_name(cluster: LocalCluster, index: int) -> str:
    return world_pods(cluster)[index]["metadata"]["name"]


def world_running(cluster: LocalCluster, nodes: int = NODES) -> bool:
    """One pod per index of a world of `nodes` exists and runs its trainer."""
    found = world_pods(cluster)
    return sorted(found) == list(range(nodes)) and all(running(pod) for pod in found.values())


def wait_for_world(cluster: LocalCluster, nodes: int = NODES, timeout: float = 300) -> None:
    """Waits until a world of `nodes` runs; if it never does, the error shows what the cluster shows."""
    try:
        wait_for(lambda: world_running(cluster, nodes), timeout, f"the world of {nodes} Running", interval=2)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{cluster_state(cluster)}") from None


def cluster_state(cluster: LocalCluster, namespace: str = NAMESPACE) -> str:
    """The namespace's pods, claims and latest events, and the node's conditions, as kubectl prints them."""
    views = [("get", "pods,pvc,jobs,statefulsets", "-n", namespace, "-o", "wide"),
             ("get", "events", "-n", namespace, "--sort-by=.lastTimestamp"), ("describe", "nodes")]  # fmt: skip
    return "\n".join(cluster.kubectl(*view, check=False).stdout[-4000:] for view in views)


def logs(cluster: LocalCluster, namespace: str, pod: str, previous: bool = False) -> str:
    args = ["logs", pod, "-n", namespace, "-c", "trainer"] + (["--previous"] if previous else [])
    result = cluster.kubectl(*args, check=False)
    return result.stdout if result.returncode == 0 else ""


def all_logs(cluster: LocalCluster, namespace: str, pod: str) -> str:
    """The pod's trainer log, the previous container's first (a StatefulSet restarts a finished one)."""
    return logs(cluster, namespace, pod, previous=True) + logs(cluster, namespace, pod)


def exec_python(cluster: LocalCluster, namespace: str, pod: str, code: str) -> str:
    """Runs Python in the pod's trainer container (as the container's user) and returns stdout."""
    return cluster.kubectl("exec", pod, "-n", namespace, "-c", "trainer", "--", "python", "-c", code).stdout


def job_condition(cluster: LocalCluster) -> str | None:
    """Complete or Failed once the dev stack's Job has ended, else None."""
    conditions = get(cluster, "job", WORKLOAD, NAMESPACE).get("status", {}).get("conditions") or []
    return next((c["type"] for c in conditions if c["type"] in ("Complete", "Failed") and c["status"] == "True"), None)


def run_dir(cluster: LocalCluster) -> Path:
    """The dev run's directory, /out/<run>, on this machine."""
    return claim_path(cluster, NAMESPACE, "outputs-pvc") / RUN


def claim_path(cluster: LocalCluster, namespace: str, claim: str) -> Path:
    """The directory on this machine behind a bound claim (the cluster's local volumes)."""
    volume = get(cluster, "pvc", claim, namespace)["spec"]["volumeName"]
    pv = json.loads(cluster.kubectl("get", "pv", volume, "-o", "json").stdout)
    return Path(pv["spec"]["local"]["path"])


class LogStream:
    """`kubectl logs -f` of one pod into a file, from now until the pod is gone."""

    def __init__(self, cluster: LocalCluster, namespace: str, pod: str, path: Path):
        self.path = path
        self._file = open(path, "wb")
        self._proc = subprocess.Popen(
            cluster.kubectl_argv("logs", "-f", pod, "-n", namespace, "-c", "trainer"),
            stdout=self._file, stderr=subprocess.STDOUT, env=cluster.kubectl_env,
        )  # fmt: skip

    def text(self, wait: float = 15) -> str:
        try:
            self._proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._file.close()
        return self.path.read_text(errors="replace")
