"""The dev stack's own objects on a real single-node cluster, running the image built from
trainer/Dockerfile: a two-pod world that trains to completion through pod 0's DNS name and then
stays finished; pods, DNS, the container's security context and mounts, the NetworkPolicy
enforced; and a pod deletion answered with a checkpoint."""

from __future__ import annotations

import contextlib
import json
import shlex
import subprocess
import time

import pytest

from cluster_testing import (
    LONG_RUN, MASTER, NAMESPACE, NODES, REPO, RUN, SERVICE, WORKLOAD, LogStream, all_logs, exec_python, get, is_store_pod, job_condition,
    node_cpu, pod_name, pods, run_dir, running, wait_for, wait_for_world, world_pods,
)  # fmt: skip
from trainer_testing import done_lines, epoch_records
from wandb_records import offline_runs
from policy_checks import document, pause_pod, the_network_policies_admit_only_the_world

from trainer import contract
from trainer.load import load_model

pytestmark = pytest.mark.timeout(1200)


def test_the_dev_run_trains_to_completion_and_stays_finished(cluster, dev_stack, tmp_path):
    dev_stack.defaults["env__WANDB_MODE"] = "offline"  # W&B's run kept on the outputs claim, for `wandb sync`
    dev_stack.up(workload__waitFor="running")
    # `up` waited for the world to run and ended saying so, as its worldState output does
    assert f"\n    world: admitted and running ({NODES}/{NODES} pods" in dev_stack.up_output, dev_stack.up_output
    assert dev_stack.outputs["worldState"].startswith(f"admitted and running ({NODES}/{NODES} pods")
    assert wait_for(lambda: job_condition(cluster), 600, "the Job to end", interval=3) == "Complete"
    dev_stack.refresh()  # the program looks again
    assert dev_stack.outputs["worldState"] == "completed"
    names = {index: pod["metadata"]["name"] for index, pod in world_pods(cluster).items()}
    assert sorted(names) == list(range(NODES))
    done = {index: done_lines(all_logs(cluster, NAMESPACE, name)) for index, name in names.items()}

    # Both ranks report the same final weights: one world of two trained together.
    sums = {line["params_sum"] for lines in done.values() for line in lines}
    assert len(sums) == 1, _world_story(cluster, names)
    ranks = {line["rank"] for lines in done.values() for line in lines}
    assert ranks == {"0", "1"}, done
    # Global rank 0 (the one that logs, checkpoints and writes outputs) runs in pod 0, which the
    # stack's kubectlFollowRank0 command follows.
    assert [line["rank"] for line in done[0]] == ["0"], done
    assert "[DDP] process global_rank=0 local_rank=0 pod_index=0 " in all_logs(cluster, NAMESPACE, names[0])
    # Each process computes on the threads its pod's CPU allows (the dev pods ask for 1 CPU): not on
    # every CPU of the node, which pods side by side would fight over.
    for name in names.values():
        threads = [line.rsplit(" threads=", 1)[1] for line in all_logs(cluster, NAMESPACE, name).splitlines() if "[DDP] process " in line]
        assert threads == ["1"], threads
    # Every pod met the others at pod 0's DNS name, on a cluster whose domain is not cluster.local.
    for name in names.values():
        log = all_logs(cluster, NAMESPACE, name)
        assert f"master={MASTER}:" in log or f"master={MASTER} " in log, log[-2000:]

    # The outputs claim holds the run: its epochs, best, metrics and checkpoints.
    outputs = run_dir(cluster)
    assert (outputs / "epoch-1").is_dir() and (outputs / "epoch-2").is_dir(), sorted(outputs.iterdir())
    assert (outputs / "best").is_symlink() and (outputs / "best").resolve().parent == outputs.resolve()
    metrics = epoch_records(outputs)
    assert [m["epoch"] for m in metrics] == [1, 2]
    assert all(m["val_loss"] > 0 and m["val_ppl"] > 1 for m in metrics), metrics
    assert sorted((outputs / "checkpoints").glob("ckpt-*.json")), "no checkpoint was committed"
    # Rank 0 kept its W&B run there too, in the image's wandb, with the same figures and result.
    (offline,) = offline_runs(outputs)
    assert offline.exit_code == 0 and offline.summary["result/params_sum"] == float(next(iter(sums))), offline.summary
    assert {s: f["epoch/val_loss"] for s, f in offline.history.items() if "epoch/val_loss" in f} == {m["global_step"]: m["val_loss"] for m in metrics}

    # The stack's kubectlRunStatus command says so.
    status = dev_stack.outputs["kubectlRunStatus"].split()
    assert status[:1] == ["kubectl"]
    assert "Complete" in cluster.kubectl(*status[1:]).stdout

    # The pods ended and hold nothing: a pod asking for the node's whole CPU is scheduled. The
    # rendezvous store's pod stays, idle, asking for memory only.
    finished = pods(cluster, NAMESPACE)
    assert {pod["status"]["phase"] for pod in finished.values()} == {"Succeeded"}, finished.keys()
    (store,) = [pod for pod in pods(cluster, NAMESPACE, store=True).values() if is_store_pod(pod)]
    assert store["status"]["phase"] == "Running" and "cpu" not in store["spec"]["containers"][0]["resources"]["requests"]
    greedy = pause_pod("cpu-taker", cluster.images["pause"], {"app": "cpu-taker"}, cpu=node_cpu(cluster))
    cluster.kubectl("apply", "-f", "-", input=json.dumps(greedy))
    wait_for(lambda: running(get(cluster, "pod", "cpu-taker", NAMESPACE)), 120, "a pod using the freed CPU to run")
    cluster.kubectl("delete", "pod", "cpu-taker", "-n", NAMESPACE, "--wait=true")

    # Nothing trains again: no pod is added or restarted in 30 s, three times the kubelet's first
    # restart back-off (10 s) and far longer than the Job controller takes to replace a pod.
    time.sleep(30)
    later = pods(cluster, NAMESPACE)
    assert later.keys() == finished.keys()
    assert all(s.get("restartCount", 0) == 0 for p in later.values() for s in p["status"].get("containerStatuses", []))
    # An up with nothing changed changes nothing.
    job_uid = get(cluster, "job", WORKLOAD, NAMESPACE)["metadata"]["uid"]
    dev_stack.up()
    assert get(cluster, "job", WORKLOAD, NAMESPACE)["metadata"]["uid"] == job_uid
    assert pods(cluster, NAMESPACE).keys() == finished.keys()

    # A change to the run (one more epoch) replaces the Job, and the new one goes on from the checkpoint.
    longer = list(contract.DEFAULT_TRAIN_ARGS) + ["--epochs", "3"]
    dev_stack.up(run__args=longer)
    assert get(cluster, "job", WORKLOAD, NAMESPACE)["metadata"]["uid"] != job_uid
    assert wait_for(lambda: job_condition(cluster), 600, "the longer run's Job to end", interval=3) == "Complete"
    resumed = all_logs(cluster, NAMESPACE, pod_name(cluster, 0))
    assert "[CKPT] resumed from" in resumed and "[EPOCH] 3/3" in resumed, resumed[-3000:]
    metrics = epoch_records(outputs)
    assert [m["epoch"] for m in metrics] == [1, 2, 3]
    first, longer_run = offline_runs(outputs)  # the same W&B run, resumed
    assert longer_run.run_id == first.run_id and longer_run.exit_code == 0 and max(longer_run.history) == metrics[-1]["global_step"]

    # The stack's resultsCommand copies the run's results to this machine with kubectl alone; with
    # --checkpoints, its checkpoints too. The pod it reads the claim with is removed.
    command = [*shlex.split(dev_stack.outputs["resultsCommand"]), "--kubeconfig", cluster.kubeconfig]
    copied = subprocess.run([*command, "--to", str(tmp_path / "results")], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert copied.returncode == 0, copied.stderr
    results = tmp_path / "results" / RUN
    assert sorted(p.name for p in results.iterdir()) == ["best", "loss.png", "metrics.jsonl", "train-steps.jsonl", "wandb"]
    for name in ("best/model.pt", "best/model.json", "loss.png", "metrics.jsonl", "train-steps.jsonl"):
        assert (results / name).read_bytes() == (outputs / name).read_bytes(), name
    assert [run.history for run in offline_runs(results)] == [first.history, longer_run.history]  # for `wandb sync` here
    assert load_model(results / "best").cfg == load_model(outputs / "best").cfg
    assert f"{results / 'best' / 'model.pt'}  " in copied.stdout
    with_checkpoints = subprocess.run([*command, "--to", str(tmp_path / "all"), "--checkpoints"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert with_checkpoints.returncode == 0, with_checkpoints.stderr
    assert sorted(p.name for p in (tmp_path / "all" / RUN / "checkpoints").iterdir()) == sorted(p.name for p in (outputs / "checkpoints").iterdir())
    missing = subprocess.run([*command, "--run", "no-such-run"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert missing.returncode == 1 and f"no run no-such-run in the outputs claim; runs there: {RUN}" in missing.stderr, missing.stderr
    assert not [name for name, pod in pods(cluster, NAMESPACE).items()
                if name.startswith("results-") and not pod["metadata"].get("deletionTimestamp")]  # fmt: skip


def _world_story(cluster, names: dict[int, str]) -> str:
    """What each pod's log says of its world (processes, resumes, hangs, results) and its restarts."""
    story = []
    for index, name in sorted(names.items()):
        restarts = [s.get("restartCount") for s in get(cluster, "pod", name, NAMESPACE)["status"].get("containerStatuses", [])]
        marks = ("[DDP]", "[CKPT]", "[HANG]", "[DONE]", "Traceback", "torch.distributed.elastic")
        lines = [row for row in all_logs(cluster, NAMESPACE, name).splitlines() if row.startswith(marks) or "restart" in row.lower()]
        story.append(f"pod {index} ({name}, restarts {restarts}):\n" + "\n".join(lines[-40:]))
    return "\n".join(story)


def _not_ready_pod(image: str, labels: dict[str, str]) -> dict:
    """A pod the rendezvous Service selects, that never becomes Ready (a readiness gate nobody sets)."""
    pod = pause_pod("dns-probe", image, labels)  # no CPU request: the world's two pods hold the node's CPUs
    pod["spec"]["readinessGates"] = [{"conditionType": "ddp-infra.test/never"}]
    return pod


def test_the_pods_on_a_real_node(cluster, dev_stack, tmp_path):
    """A world that keeps training while the test looks inside its pods, then loses a pod."""
    dev_stack.up(run__args=LONG_RUN)
    documents = dev_stack.applied_objects()
    wait_for_world(cluster)
    names = {index: pod["metadata"]["name"] for index, pod in world_pods(cluster).items()}
    hostnames = [f"{WORKLOAD}-{index}" for index in range(NODES)]  # a Job's pod: <job>-<index>

    # DNS: every pod's name under the headless Service resolves from inside a pod, the short
    # form through the pod's search path too.
    lookup = (
        "import socket, sys; "
        "print(' '.join(socket.gethostbyname(h) for h in sys.argv[1:]))"
    )
    dns_names = [f"{host}.{SERVICE}.{NAMESPACE}.svc.{cluster.domain}" for host in hostnames] + [MASTER]
    code = lookup.replace("sys.argv[1:]", repr(dns_names))
    addresses = exec_python(cluster, NAMESPACE, names[1], code).split()
    pod_ips = {name: pod["status"]["podIP"] for name, pod in pods(cluster, NAMESPACE).items()}
    assert addresses == [pod_ips[names[i]] for i in range(NODES)] + [pod_ips[names[0]]]
    # ...while the name written out for the usual domain, which MASTER_ADDR once was, does not.
    fixed = f"{hostnames[0]}.{SERVICE}.{NAMESPACE}.svc.cluster.local"
    failed = exec_python(cluster, NAMESPACE, names[1], f"""
import socket
try:
    print(socket.gethostbyname({fixed!r}))
except socket.gaierror as error:
    print('unresolved', error)
""")
    assert failed.startswith("unresolved"), failed

    # publishNotReadyAddresses: a pod of the world that is not Ready (a readiness gate nobody
    # sets) has its DNS name all the same, which is what lets a world form before any pod is Ready.
    selector = document(documents, "Service", SERVICE)["spec"]["selector"]
    cluster.kubectl("apply", "-f", "-", input=json.dumps(_not_ready_pod(cluster.images["pause"], selector)))
    wait_for(lambda: running(get(cluster, "pod", "dns-probe", NAMESPACE)), 120, "the not-ready probe pod to run")
    probe = get(cluster, "pod", "dns-probe", NAMESPACE)
    assert next(c for c in probe["status"]["conditions"] if c["type"] == "Ready")["status"] == "False"
    probe_name = f"dns-probe.{SERVICE}.{NAMESPACE}.svc.{cluster.domain}"
    resolved = exec_python(cluster, NAMESPACE, names[1], f"import socket; print(socket.gethostbyname({probe_name!r}))")
    assert resolved.strip() == probe["status"]["podIP"]
    cluster.kubectl("delete", "pod", "dns-probe", "-n", NAMESPACE, "--wait=true")

    # The container: uid/gid 1000, read-only root, /dev/shm of the configured size, /data and /out writable.
    report = json.loads(exec_python(cluster, NAMESPACE, names[0], """
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

    the_network_policies_admit_only_the_world(cluster, names, documents)

    # kubectl delete pod: SIGTERM reaches the trainer, which checkpoints before the pod is gone.
    checkpoints = run_dir(cluster) / "checkpoints"
    wait_for(lambda: "[TRAIN]" in all_logs(cluster, NAMESPACE, names[0]), 300, "training to start", interval=2)
    before = {p.name for p in checkpoints.glob("ckpt-*.json")}
    with contextlib.ExitStack() as open_streams:
        streams = {pod: open_streams.enter_context(LogStream(cluster, NAMESPACE, pod, tmp_path / f"{pod}.log")) for pod in names.values()}
        cluster.kubectl("delete", "pod", names[1], "-n", NAMESPACE, "--wait=true", "--timeout=180s", timeout=210)
        new = {p.name for p in checkpoints.glob("ckpt-*.json")} - before
        records = [json.loads((checkpoints / name).read_text()) for name in sorted(new)]
        assert any(r["reason"] == "sigterm" for r in records), (records, {p: s.text(1)[-1500:] for p, s in streams.items()})
        texts = {pod: stream.text() for pod, stream in streams.items()}
    combined = "\n".join(texts.values())
    # The trainer stopped itself after the checkpoint, before the kubelet's SIGKILL at the grace period's end.
    assert "(sigterm)" in combined and "[STOP]" in combined, combined[-3000:]
    # The Job brings index 1 back as a new pod.
    wait_for(lambda: world_pods(cluster).get(1, {}).get("metadata", {}).get("name") not in (None, names[1]), 120,
             "the deleted pod to be replaced")
