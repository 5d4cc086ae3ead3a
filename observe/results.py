"""A run's results, copied from the outputs claim to this machine with kubectl alone: the stack's
`resultsCommand` output, `python -m observe.results -n NS --run RUN --claim CLAIM --image IMAGE -l
SELECTOR [--to DIR] [--checkpoints]`.

A pod of its own reads the claim (the run's image, the claim mounted read-only, the restricted Pod
Security level, an hour's deadline), on the node of a running pod of the world where there is one,
since a ReadWriteOnce volume is attached to one node at a time. `kubectl exec` streams a tar of the
run's results, unpacked under DIR/<run>: `best/` (the best epoch's model and its card),
`metrics.jsonl`, `train-steps.jsonl`, `loss.png`, W&B's run files where it ran (`wandb/`: `wandb sync`
uploads its offline runs from here), what the hang watch left of a hung world (`hangs/`), and with --checkpoints `checkpoints/`. The pod
is deleted however the copy ends.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any, Optional

from observe.kubectl import Kubectl, KubectlError
from observe.world_state import why_waiting
from trainer import contract
from trainer.fetch import data_members

RESULTS = ("best", "metrics.jsonl", "train-steps.jsonl", "loss.png", "wandb", "hangs")
CHECKPOINTS = "checkpoints"
# W&B's debug logs link into the home of a pod that is gone; latest-run names a run copied already
LEFT_OUT = ("wandb/latest-run", "wandb/*/logs")
CONTAINER = "reader"
START_TIMEOUT_S = 300
COPY_TIMEOUT_S = 3600  # the reader pod's own deadline too


def reader_pod(name: str, image: str, pull_secrets: list[str], claim: str, node: Optional[str]) -> dict[str, Any]:
    """A pod that mounts the outputs claim read-only and waits to be read from."""
    restricted = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
                  "capabilities": {"drop": ["ALL"]}}  # fmt: skip
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/component": "results-reader"}},
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": COPY_TIMEOUT_S,
            "automountServiceAccountToken": False,
            **({"affinity": on_node(node)} if node else {}),
            **({"imagePullSecrets": [{"name": name} for name in pull_secrets]} if pull_secrets else {}),
            "securityContext": {"runAsNonRoot": True, "runAsUser": contract.IMAGE_UID, "runAsGroup": contract.IMAGE_GID,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": CONTAINER, "image": image, "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", str(COPY_TIMEOUT_S)],
                "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
                "securityContext": restricted,
                "volumeMounts": [{"name": "outputs", "mountPath": contract.OUT_MOUNT, "readOnly": True}],
            }],
            "volumes": [{"name": "outputs", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}],
        },
    }  # fmt: skip


def on_node(node: str) -> dict[str, Any]:
    """Scheduled on `node` (as a DaemonSet's pods are: by its name, through the scheduler)."""
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def node_of_a_running_pod(kubectl: Kubectl, selector: str) -> Optional[str]:
    running = [pod for pod in kubectl.items("pods", selector) if pod.get("status", {}).get("phase") == "Running"]
    return running[0]["spec"].get("nodeName") if running else None


def wait_until_running(kubectl: Kubectl, name: str, timeout: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while True:
        pod = kubectl.find("pod", name) or {}
        status = pod.get("status", {})
        if status.get("phase") == "Running":
            return
        if status.get("phase") in ("Failed", "Succeeded") or time.monotonic() > deadline:
            raise KubectlError(f"the pod reading the outputs claim did not start: {why_waiting(status) or 'phase ' + status.get('phase', 'unknown')}")
        time.sleep(1)


def tar_script(run: str, checkpoints: bool) -> str:
    """What the reader runs: a tar of the run's results that exist, symlinks followed (best -> epoch-N)."""
    wanted = " ".join(shlex.quote(p) for p in (*RESULTS, *([CHECKPOINTS] if checkpoints else ())))
    where = shlex.quote(f"{contract.OUT_MOUNT}/{run}")
    return (f"cd {where} 2>/dev/null || {{ echo \"no run {run} in the outputs claim; runs there: $(ls {contract.OUT_MOUNT})\" >&2; exit 3; }}; "
            f"set --; for f in {wanted}; do [ -e \"$f\" ] && set -- \"$@\" \"$f\"; done; "
            f"[ $# -gt 0 ] || {{ echo \"run {run} has no results yet\" >&2; exit 4; }}; "
            f"exec tar -chf - {' '.join(f'--exclude={shlex.quote(p)}' for p in LEFT_OUT)} \"$@\"")  # fmt: skip


def copy_results(kubectl: Kubectl, run: str, claim: str, image: str, pull_secrets: list[str], selector: str, to: Path,
                 checkpoints: bool) -> Path:  # fmt: skip
    """Copies the run's results under `to`/<run>; returns that directory."""
    name = f"results-{run}".lower().replace("_", "-").replace(".", "-")[:63].rstrip("-")
    kubectl.run("delete", "pod", name, "--ignore-not-found", "--wait=true")  # one an interrupted copy left
    pod = reader_pod(name, image, pull_secrets, claim, node_of_a_running_pod(kubectl, selector))
    kubectl.run("apply", "-f", "-", input=json.dumps(pod))
    try:
        wait_until_running(kubectl, name)
        destination = to / run
        destination.mkdir(parents=True, exist_ok=True)
        exec_tar = kubectl.argv("exec", name, "-c", CONTAINER, "--", "sh", "-c", tar_script(run, checkpoints))
        with subprocess.Popen(exec_tar, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as reading:
            try:
                with tarfile.open(fileobj=reading.stdout, mode="r|") as archive:
                    archive.extractall(destination, members=data_members(archive, destination))
                unpacked = None
            except tarfile.TarError as error:
                unpacked = error
            said = reading.stderr.read().decode(errors="replace").strip()
            if reading.wait(COPY_TIMEOUT_S) != 0 or unpacked:
                raise KubectlError(said or f"kubectl exec {name}: {unpacked or f'exit {reading.returncode}'}")
        return destination
    finally:
        kubectl.run("delete", "pod", name, "--ignore-not-found", "--wait=false", check=False)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m observe.results", description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--namespace", required=True)
    parser.add_argument("--run", required=True, help="the run directory's name under /out (the stack's runName)")
    parser.add_argument("--claim", required=True, help="the outputs claim")
    parser.add_argument("--image", required=True, help="an image with sh and tar (the world's)")
    parser.add_argument("--pull-secret", action="append", default=[], help="an image pull Secret of the world's (repeat for each)")
    parser.add_argument("-l", "--selector", required=True, help="the label selector of the world's pods")
    parser.add_argument("--to", type=Path, default=Path("results"), help="where the run's directory is written (default ./results)")
    parser.add_argument("--checkpoints", action="store_true", help="the run's checkpoints too (they can be large)")
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: kubectl's)")
    args = parser.parse_args(argv)
    kubectl = Kubectl(args.namespace, args.context, args.kubeconfig)
    try:
        destination = copy_results(kubectl, args.run, args.claim, args.image, args.pull_secret, args.selector, args.to,
                                   args.checkpoints)  # fmt: skip
    except KubectlError as error:
        print(f"results: {error}", file=sys.stderr)
        return 1
    for path in sorted(p for p in destination.rglob("*") if p.is_file()):
        print(f"{path}  {path.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
