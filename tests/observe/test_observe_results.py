"""The pod that reads a run's results (observe/results.py) asks for no more than the restricted Pod
Security level that the stack's namespaces enforce, reads the claim only, and ends on its own. The
copy itself runs against the local cluster (test_cluster_dev_stack.py)."""

from __future__ import annotations

from ddp_infra.pod_security import RESTRICTED, pod_security_level
from observe.results import COPY_TIMEOUT_S, on_node, reader_pod


def test_the_reader_pod_meets_the_restricted_level_reads_only_and_ends_on_its_own():
    pod = reader_pod("results-run", "ddp-trainer:dev", ["registry-key"], "outputs-pvc", "node-3")
    spec = pod["spec"]
    assert pod_security_level(spec) == RESTRICTED
    (container,) = spec["containers"]
    assert container["volumeMounts"] == [{"name": "outputs", "mountPath": "/out", "readOnly": True}]
    assert spec["volumes"] == [{"name": "outputs", "persistentVolumeClaim": {"claimName": "outputs-pvc", "readOnly": True}}]
    assert spec["automountServiceAccountToken"] is False and spec["restartPolicy"] == "Never"
    assert spec["activeDeadlineSeconds"] == COPY_TIMEOUT_S and container["command"] == ["sleep", str(COPY_TIMEOUT_S)]
    assert spec["affinity"] == on_node("node-3") and spec["imagePullSecrets"] == [{"name": "registry-key"}]
    assert "affinity" not in reader_pod("results-run", "ddp-trainer:dev", [], "outputs-pvc", None)["spec"]
