"""The dev stack's own objects on a real single-node cluster, running the image built from
trainer/Dockerfile: pods, DNS, the container's security context and mounts, a two-pod world that
trains to completion through pod 0's DNS name, and a pod deletion answered with a checkpoint."""

from __future__ import annotations

import json

import pytest

from cluster_testing import (
    LONG_RUN, MASTER, NAMESPACE, POD_NAMES, RUN, SERVICE, LogStream, all_logs, claim_path, exec_python, get, pods,
    running, wait_for, world_running,
)  # fmt: skip
from trainer import contract

pytestmark = pytest.mark.timeout(1200)


def test_the_dev_world_trains_to_completion(cluster, dev_world):
    dev_world()
    done = {}

    def finished():
        for pod in POD_NAMES:
            done[pod] = [line for line in all_logs(cluster, NAMESPACE, pod).splitlines() if line.startswith("[DONE]")]
        return all(done.values())

    wait_for(finished, 600, "a [DONE] line from both pods", interval=3)

    # Both ranks report the same final weights: one world of two trained together.
    sums = {line.split("params_sum=")[1].split()[0] for lines in done.values() for line in lines}
    assert len(sums) == 1, done
    ranks = {line.split()[1] for lines in done.values() for line in lines}
    assert ranks == {"rank=0", "rank=1"}, done
    # Global rank 0 (the one that logs, checkpoints and writes outputs) runs in pod 0, which the
    # stack's kubectlFollowRank0 command follows.
    assert "[DONE] rank=0 " in "\n".join(done[POD_NAMES[0]]), done
    assert "[DDP] process global_rank=0 local_rank=0 pod_index=0 " in all_logs(cluster, NAMESPACE, POD_NAMES[0])
    # Every pod met the others at pod 0's DNS name, on a cluster whose domain is not cluster.local.
    for pod in POD_NAMES:
        log = all_logs(cluster, NAMESPACE, pod)
        assert f"master={MASTER}:" in log or f"master={MASTER} " in log, log[-2000:]

    # The outputs claim holds the run: its epochs, best, metrics and checkpoints.
    run_dir = claim_path(cluster, NAMESPACE, "outputs-pvc") / RUN
    assert (run_dir / "epoch-1").is_dir() and (run_dir / "epoch-2").is_dir(), sorted(run_dir.iterdir())
    assert (run_dir / "best").is_symlink() and (run_dir / "best").resolve().parent == run_dir.resolve()
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in metrics] == [1, 2]
    assert all(m["val_loss"] > 0 and m["val_ppl"] > 1 for m in metrics), metrics
    assert sorted((run_dir / "checkpoints").glob("ckpt-*.json")), "no checkpoint was committed"


def _not_ready_pod(image: str, labels: dict[str, str]) -> dict:
    """A pod the rendezvous Service selects, that never becomes Ready; restricted like the trainer's."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "dns-probe", "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "hostname": "dns-probe", "subdomain": SERVICE,
            "readinessGates": [{"conditionType": "ddp-infra.test/never"}],
            "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "pause", "image": image, "imagePullPolicy": "IfNotPresent",
                            # no CPU request: the world's two pods hold both of the node's CPUs
                            "resources": {"limits": {"memory": "16Mi"}},
                            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}],
        },
    }  # fmt: skip


def test_the_pods_on_a_real_node(cluster, dev_world, tmp_path):
    """A world that keeps training while the test looks inside its pods, then loses a pod."""
    documents = dev_world(run__args=LONG_RUN)
    wait_for(lambda: world_running(cluster), 300, "both pods Running", interval=2)

    # DNS: every pod's name under the headless Service resolves from inside a pod, the short
    # form through the pod's search path too.
    lookup = (
        "import socket, sys; "
        "print(' '.join(socket.gethostbyname(h) for h in sys.argv[1:]))"
    )
    names = [f"{pod}.{SERVICE}.{NAMESPACE}.svc.{cluster.domain}" for pod in POD_NAMES] + [MASTER]
    code = lookup.replace("sys.argv[1:]", repr(names))
    addresses = exec_python(cluster, NAMESPACE, POD_NAMES[1], code).split()
    pod_ips = {name: pod["status"]["podIP"] for name, pod in pods(cluster, NAMESPACE).items()}
    assert addresses == [pod_ips[p] for p in POD_NAMES] + [pod_ips[POD_NAMES[0]]]
    # ...while the name written out for the usual domain, which MASTER_ADDR once was, does not.
    fixed = f"{POD_NAMES[0]}.{SERVICE}.{NAMESPACE}.svc.cluster.local"
    failed = exec_python(cluster, NAMESPACE, POD_NAMES[1], f"""
import socket
try:
    print(socket.gethostbyname({fixed!r}))
except socket.gaierror as error:
    print('unresolved', error)
""")
    assert failed.startswith("unresolved"), failed

    # publishNotReadyAddresses: a pod of the world that is not Ready (a readiness gate nobody
    # sets) has its DNS name all the same, which is what lets a world form before any pod is Ready.
    selector = next(d for d in documents if d["kind"] == "StatefulSet")["spec"]["selector"]["matchLabels"]
    cluster.kubectl("apply", "-f", "-", input=json.dumps(_not_ready_pod(cluster.images["pause"], selector)))
    wait_for(lambda: running(get(cluster, "pod", "dns-probe", NAMESPACE)), 120, "the not-ready probe pod to run")
    probe = get(cluster, "pod", "dns-probe", NAMESPACE)
    assert next(c for c in probe["status"]["conditions"] if c["type"] == "Ready")["status"] == "False"
    probe_name = f"dns-probe.{SERVICE}.{NAMESPACE}.svc.{cluster.domain}"
    resolved = exec_python(cluster, NAMESPACE, POD_NAMES[1], f"import socket; print(socket.gethostbyname({probe_name!r}))")
    assert resolved.strip() == probe["status"]["podIP"]
    cluster.kubectl("delete", "pod", "dns-probe", "-n", NAMESPACE, "--wait=true")

    # The container: uid/gid 1000, read-only root, /dev/shm of the configured size, /data and /out writable.
    report = json.loads(exec_python(cluster, NAMESPACE, POD_NAMES[0], """
import json, os
def writable(path):
    try:
        with open(os.path.join(path, '.probe'), 'w') as f:
            f.write('x')
        os.remove(os.path.join(path, '.probe'))
        return True
    except OSError as e:
        return e.strerror
shm = os.statvfs('/dev/shm')
print(json.dumps({'uid': os.getuid(), 'gid': os.getgid(), 'shm': shm.f_blocks * shm.f_frsize,
                  'root': writable('/app'), 'etc': writable('/etc'),
                  'data': writable('/data'), 'out': writable('/out'), 'tmp': writable('/tmp')}))
"""))
    assert (report["uid"], report["gid"]) == (contract.IMAGE_UID, contract.IMAGE_GID)
    assert report["root"] == report["etc"] == "Read-only file system", report
    assert report["data"] is report["out"] is report["tmp"] is True, report
    assert report["shm"] == 512 * 1024**2  # the dev stack's shmSize: 512Mi

    # kubectl delete pod: SIGTERM reaches the trainer, which checkpoints before the pod is gone.
    checkpoints = claim_path(cluster, NAMESPACE, "outputs-pvc") / RUN / "checkpoints"
    wait_for(lambda: "[TRAIN]" in all_logs(cluster, NAMESPACE, POD_NAMES[0]) + all_logs(cluster, NAMESPACE, POD_NAMES[1]),
             300, "training to start", interval=2)
    before = {p.name for p in checkpoints.glob("ckpt-*.json")}
    streams = {pod: LogStream(cluster, NAMESPACE, pod, tmp_path / f"{pod}.log") for pod in POD_NAMES}
    old_uid = get(cluster, "pod", POD_NAMES[1], NAMESPACE)["metadata"]["uid"]
    cluster.kubectl("delete", "pod", POD_NAMES[1], "-n", NAMESPACE, "--wait=true", "--timeout=180s", timeout=210)
    new = {p.name for p in checkpoints.glob("ckpt-*.json")} - before
    records = [json.loads((checkpoints / name).read_text()) for name in sorted(new)]
    assert any(r["reason"] == "sigterm" for r in records), (records, {p: s.text(1)[-1500:] for p, s in streams.items()})
    texts = {pod: stream.text() for pod, stream in streams.items()}
    combined = "\n".join(texts.values())
    # The trainer stopped itself after the checkpoint, before the kubelet's SIGKILL at the grace period's end.
    assert "(sigterm)" in combined and "[STOP]" in combined, combined[-3000:]
    # The StatefulSet brings the pod back under the same name, a new pod.
    wait_for(lambda: get(cluster, "pod", POD_NAMES[1], NAMESPACE)["metadata"]["uid"] != old_uid, 120,
             "the deleted pod to be re-created")
