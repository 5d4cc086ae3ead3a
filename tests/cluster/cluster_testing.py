"""Deploying the program's objects to the local cluster and watching what the cluster does.

The objects are the program's own, evaluated under mocks from the committed stack file (see
infra_harness), and applied with kubectl in the order the provider creates them: the namespace,
then what the workload depends on, then the workload.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

from infra_harness import evaluate, stack_config_with, stack_file_config
from toolchain.cluster import LocalCluster

WORKLOAD_KINDS = ("StatefulSet", "Job")

# The dev stack as committed: what the tests deploy and where they look for it.
DEV = stack_file_config("dev")
NAMESPACE = DEV["namespace"]["name"]
RUN = DEV["run"]["name"]
WORKLOAD = "trainer"
SERVICE = f"{WORKLOAD}-rdzv"
POD_NAMES = [f"{WORKLOAD}-{i}" for i in range(int(DEV["nodes"]))]
MASTER = f"{WORKLOAD}-0.{SERVICE}"
TEST_DOMAIN = "ddp-infra.test"  # the test cluster's domain
# The smoke task made long enough to look inside its pods while it trains.
LONG_RUN = ["-m", "trainer.train", "smoke", "--epochs", "500", "--batch", "256", "--samples", "65536",
            "--features", "128", "--classes", "4", "--lr", "3e-3", "--seed", "42", "--checkpoint-every", "0"]  # fmt: skip


def stack_objects(stack: str = "dev", **overrides: Any) -> list[dict[str, Any]]:
    """The Kubernetes objects of a committed stack, with config overrides (see stack_config_with)."""
    evaluation = evaluate(stack_config_with(stack, **overrides), stack=stack)
    assert evaluation.error is None, str(evaluation.error)
    return evaluation.kubernetes_manifests


def deploy(cluster: LocalCluster, documents: list[dict[str, Any]]) -> None:
    def apply(selected: list[dict[str, Any]]) -> None:
        if selected:
            # JSON, as the provider sends it (YAML would turn strings such as 3e-3 into numbers).
            cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": selected}))

    apply([d for d in documents if d["kind"] == "Namespace"])
    apply([d for d in documents if d["kind"] not in ("Namespace", *WORKLOAD_KINDS)])
    apply([d for d in documents if d["kind"] in WORKLOAD_KINDS])


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


def world_running(cluster: LocalCluster) -> bool:
    """Every pod of the dev world exists and runs its trainer."""
    found = pods(cluster, NAMESPACE)
    return set(found) >= set(POD_NAMES) and all(running(found[name]) for name in POD_NAMES)


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
