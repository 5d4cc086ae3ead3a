"""Deploying the dev stack to the local cluster with the real `pulumi up` and `pulumi destroy`
(EngineStack), and watching what the cluster does."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Any


from ddp_infra.claim_changes import ClaimChangeRefused
from ddp_infra import config as stack_config
from ddp_infra.config.scalars import parse_quantity
from ddp_infra.names import PROJECT
from ddp_infra.world import World
from infra_harness import DELETE, stack_config_with, stack_file_config
from pulumi_project import PulumiProject, Result
from trainer import contract
from trainer.lines import Resumed
from trainer_testing import done_lines, is_training_process, resumed_lines, uninterrupted_result, with_option
from waiting import wait_for
from demo.stack import write_stack_config
from toolchain.cluster import LocalCluster
from toolchain.cluster.cgroups import cgroup_mounts
from toolchain.cluster.processes import ClusterError


REPO = Path(__file__).resolve().parents[2]
# The dev stack as committed: what the tests deploy and where they look for it.
DEV = stack_file_config("dev")
NAMESPACE = DEV["namespace"]["name"]
RUN = DEV["run"]["name"]
WORKLOAD = "trainer"
SERVICE = f"{WORKLOAD}-rdzv"
STORE = f"{WORKLOAD}-rdzv-store"  # the rendezvous store's Deployment, Service and NetworkPolicy
NODES = int(DEV["nodes"])
MASTER = f"{WORKLOAD}-0.{SERVICE}"
TEST_DOMAIN = "ddp-infra.test"  # the test cluster's domain
# 8 epochs of 32 steps of a 1M-parameter MLP in a world of 2, a checkpoint every 8: long enough to
# lose pods (three times) after a checkpoint before the run ends, short enough to finish. With 3
# epochs and a step of 70 ms, about 2 s of training were left after the third loss's checkpoint,
# and once no world re-formed after that loss.
CHECKPOINT_EVERY = 8
DISRUPTED_RUN = [
    "-m", "trainer.train", "smoke", "--epochs", "8", "--batch", "256", "--samples", "16384", "--features", "512",
    "--hidden", "2048", "--classes", "4", "--lr", "1e-3", "--seed", "7", "--checkpoint-every", str(CHECKPOINT_EVERY),
    "--log-every", "8", "--pg-timeout", "60",
]  # fmt: skip
# A journey that waits on Kubernetes more than on training (a node lost, capacity come and gone)
# has its world train a smaller MLP (hidden 256) at a pace: each training batch also waits 0.1 s
# (the trainer's --batch-seconds), as a rank waits on its GPU, so the world trains about 10 steps
# a second alone or beside the suite's other workers, on little CPU. Unpaced, the 1M-parameter MLP
# trained 30 steps a second alone and 1.5 to 9 in the suite, where the journeys whose run must
# outlast their losses took three times as long as alone (a spare's 438 s, an elastic world's 757 s).
BATCH_SECONDS = "0.1"


def paced(args: list[str], epochs: int) -> list[str]:
    return [*with_option(with_option(args, "--hidden", "256"), "--epochs", str(epochs)), "--batch-seconds", BATCH_SECONDS]


# The smoke task made long enough to look inside its pods while it trains, at the pace above: unpaced,
# each pod's worker took a whole CPU (20.4 CPU-s in 20 s for a pod's processes, 5.4 paced) while the
# journey looked inside.
LONG_RUN = ["-m", "trainer.train", "smoke", "--epochs", "500", "--batch", "256", "--samples", "65536",
            "--features", "128", "--classes", "4", "--lr", "3e-3", "--seed", "42", "--checkpoint-every", "0",
            "--batch-seconds", BATCH_SECONDS]  # fmt: skip


def pod_reference_result(args: list[str], out: Path, **env: str) -> dict[str, str]:
    """What an uninterrupted world of 2 ends with, computed on this machine as a pod's worker computes:
    on the threads the dev stack gives each training process (OMP_NUM_THREADS, from the pod's CPU;
    the journeys' pods ask for at most a CPU, as the dev stack's do). Their number changes float
    sums on some CPUs: seen params_sum -6.3180 on 1 thread, -6.3172 on 2."""
    world = World.from_config(stack_config.parse(DEV), PROJECT, "dev")
    return uninterrupted_result(args, out, threads=world.threads_per_process, **env)


def pause_pod_resources(cpu: str) -> dict[str, str]:
    """Stack overrides for pods that run the pause binary: `cpu` each and little memory, so that
    a test's queue or quota, not the node, is what holds a world back."""
    return {"resources__requests__cpu": cpu, "resources__requests__memory": "16Mi", "resources__limits__memory": "64Mi",
            "shmSize": "16Mi"}  # fmt: skip


def kubectl_reference(resource: dict[str, Any]) -> tuple[str, str]:
    """(namespace, `kind.group/name` as kubectl takes it) of a Kubernetes resource in the engine's state."""
    outputs = resource["outputs"]
    group = outputs["apiVersion"].rpartition("/")[0]
    kind = outputs["kind"].lower() + (f".{group}" if group else "")
    return outputs["metadata"].get("namespace", ""), f"{kind}/{outputs['metadata']['name']}"


# Every `pulumi` command the cluster journeys ran, with its cluster, for the session's closing summary (conftest.py).
ENGINE_COMMANDS: list[tuple[str, str]] = []


class EngineStack:
    """The dev stack deployed to the cluster by the real `pulumi up` and `pulumi destroy`, from a copy
    of the project with its own file state backend (tests/engine/pulumi_project.py). Each `up` writes
    the committed stack file's config with the test's changes (and `defaults`) and without renderDir,
    so the provider applies to the cluster that KUBECONFIG names."""

    def __init__(self, cluster: LocalCluster, root: Path, **defaults: Any):
        self.project = PulumiProject(root)
        self.cluster = cluster
        Path(self.project.env["KUBECONFIG"]).symlink_to(cluster.kubeconfig)
        self.stack = "dev"
        self.project.init_stack(self.stack)
        self.defaults = defaults
        self.outputs: dict[str, Any] = {}

    def _configure(self, overrides: dict[str, Any]) -> dict[str, Any]:
        values = stack_config_with("dev", kubernetes__renderDir=DELETE, **{**self.defaults, **overrides})
        write_stack_config(self.project.stack_file(self.stack), values)
        return values

    def preview(self, **overrides: Any) -> Result:
        """`pulumi preview` of the stack with the test's changes; the test reads its outcome."""
        self._configure(overrides)
        return self.project.run("preview", "--stack", self.stack, "--color", "never", check=False)

    def up(self, **overrides: Any) -> None:
        """`pulumi up` with the test's changes; its output (warnings included) in `up_output`."""
        self._configure(overrides)
        result = self.project.run("up", "--stack", self.stack, "--yes", "--skip-preview", "--color", "never", check=False)
        ENGINE_COMMANDS.append((self.cluster.name, "up"))
        if result.returncode != 0:
            if "refused: a claim" in result.output:
                raise ClaimChangeRefused(result.output)
            raise UpFailed(result)
        print(f"\n[engine] pulumi up --stack {self.stack}: {summary_line(result.output)}")
        self.up_output = result.output  # its warnings included
        self.outputs = json.loads(self.project.stack_outputs(self.stack).stdout)

    def encrypted(self, value: str) -> dict[str, str]:
        """`value` as the stack file holds one set with `--secret`, to be given to `up` as a config value."""
        self.project.config_set(self.stack, "encrypting", value, secret=True)
        return self.project.stack_config(self.stack)[f"{PROJECT}:encrypting"]

    def applied_objects(self) -> list[dict[str, Any]]:
        """The Kubernetes objects the engine's state holds, each as the cluster has it now."""
        by_namespace: dict[str, list[str]] = {}
        for resource in self.project.export_state(self.stack)["deployment"]["resources"]:
            if resource.get("custom") and resource["type"].startswith("kubernetes:") and "kind" in resource.get("outputs", {}):
                namespace, reference = kubectl_reference(resource)
                by_namespace.setdefault(namespace, []).append(reference)
        found: list[dict[str, Any]] = []
        for namespace, references in by_namespace.items():
            where = ["-n", namespace] if namespace else []
            read = json.loads(self.cluster.kubectl("get", *references, *where, "-o", "json").stdout)
            found += read["items"] if read.get("kind") == "List" else [read]
        return found

    def refresh(self) -> None:
        """`pulumi refresh --run-program`: the resources read back from the cluster, and the stack's
        outputs computed again by the program."""
        self.project.run("refresh", "--run-program", "--stack", self.stack, "--yes", "--skip-preview", "--color", "never")
        ENGINE_COMMANDS.append((self.cluster.name, "refresh"))
        self.outputs = json.loads(self.project.stack_outputs(self.stack).stdout)

    def destroy(self) -> None:
        try:
            self.project.run("destroy", "--stack", self.stack, "--yes", "--skip-preview", "--color", "never")
        finally:  # it ran, whatever it ended with
            ENGINE_COMMANDS.append((self.cluster.name, "destroy"))
        self.outputs = {}


class UpFailed(AssertionError):
    def __init__(self, result: Result):
        super().__init__(f"pulumi up failed:\n{result.describe()}")
        self.result = result


def summary_line(output: str) -> str:
    """The engine's resource count of an update ("+ 3 created, 14 unchanged"), on one line."""
    lines = output.split("Resources:", 1)[-1].split("Duration:", 1)[0].split("\n")
    return ", ".join(line.strip() for line in lines if line.strip()) or output.strip()[-200:]


def pause_stack(cluster: LocalCluster, root: Path) -> EngineStack:
    """The dev stack with the pause image as the trainer's: its `python` is the pause binary
    (toolchain/images.sh), so the pods wait for SIGTERM and exit 0, and only a kill fails one.
    A controller's own behaviour, through the real engine, without the trainer image. No liveness
    probe: the pause binary answers none, and the kubelet would stop every pod 20 s in (each then
    exiting 0, as if its world had trained)."""
    return EngineStack(cluster, root, image__name=cluster.images["pause"], image__pullPolicy="IfNotPresent", workload__liveness__seconds="0")


def delete_namespace(cluster: LocalCluster, namespace: str, timeout: float = 240) -> None:
    cluster.kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=true", f"--timeout={int(timeout)}s",
                    timeout=timeout + 30)


# The kinds the journeys read while they wait, read from the API server without a kubectl process
# (LocalCluster.api_read); kubectl reads any other.
API_PATHS = {"pod": "/api/v1/namespaces/{namespace}/pods", "job": "/apis/batch/v1/namespaces/{namespace}/jobs",
             "statefulset": "/apis/apps/v1/namespaces/{namespace}/statefulsets"}  # fmt: skip


def apply(cluster: LocalCluster, objects: list[dict[str, Any]]) -> None:
    """Objects a test sets up as a cluster's admin would (queues, flavors, topologies), applied server-side."""
    cluster.kubectl("apply", "--server-side", "--field-manager=test", "-f", "-",
                    input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))  # fmt: skip


def get(cluster: LocalCluster, kind: str, name: str, namespace: str) -> dict[str, Any]:
    if kind not in API_PATHS:
        return json.loads(cluster.kubectl("get", kind, name, "-n", namespace, "-o", "json").stdout)
    return _read_json(cluster, f"{API_PATHS[kind].format(namespace=namespace)}/{name}")


def _read_json(cluster: LocalCluster, path: str) -> dict[str, Any]:
    status, body = cluster.api_read(path)
    if status != 200:
        raise ClusterError(f"GET {path}: {status} {body.decode(errors='replace')[:500]}")
    return json.loads(body)


def node_cpu(cluster: LocalCluster) -> str:
    """The CPU the cluster's node can give its pods (its allocatable), as the node reports it."""
    node = json.loads(cluster.kubectl("get", "node", cluster.node_name, "-o", "json").stdout)
    return node["status"]["allocatable"]["cpu"]


# A pod outside any stack that holds CPU from the world's pods: the capacity a journey wants kept.
PLACEHOLDER = "capacity-placeholder"
PLACEHOLDER_NAMESPACE = "default"  # it is placed before the stack's namespace exists


def free_cpu_millis(cluster: LocalCluster) -> int:
    """The node's allocatable CPU less what its scheduled, unfinished pods ask for."""
    node = json.loads(cluster.kubectl("get", "node", cluster.node_name, "-o", "json").stdout)
    free = parse_quantity(node["status"]["allocatable"]["cpu"]) * 1000
    items = json.loads(cluster.kubectl("get", "pods", "-A", "-o", "json").stdout)["items"]
    for pod in items:
        if pod["spec"].get("nodeName") and pod["status"].get("phase") not in ("Succeeded", "Failed"):
            for container in pod["spec"]["containers"]:
                free -= parse_quantity(container.get("resources", {}).get("requests", {}).get("cpu", "0")) * 1000
    return int(free)


def place_placeholder(cluster: LocalCluster, cpu_millis: int, name: str = PLACEHOLDER) -> None:
    """A pod that does nothing but hold `cpu_millis` of the node's CPU from the world."""
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": PLACEHOLDER_NAMESPACE},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "hold", "image": cluster.images["pause"], "imagePullPolicy": "IfNotPresent", "command": ["python"],
                "resources": {"requests": {"cpu": f"{cpu_millis}m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }],
        },
    }  # fmt: skip
    cluster.kubectl("apply", "-f", "-", input=json.dumps(pod))


def hold_cpu(cluster: LocalCluster, held: dict[str, int]) -> None:
    """Placeholder pods, each holding its CPU millis from the world, once every one of them runs."""
    for name, cpu_millis in held.items():
        place_placeholder(cluster, cpu_millis, name)
    for name in held:
        wait_for(lambda: placeholder_phase(cluster, name) == "Running", 120, f"the placeholder {name} holding its CPU Running")


def remove_placeholder(cluster: LocalCluster, name: str = PLACEHOLDER) -> None:
    cluster.kubectl("delete", "pod", name, "-n", PLACEHOLDER_NAMESPACE, "--ignore-not-found", "--grace-period=0", "--force")


def placeholder_phase(cluster: LocalCluster, name: str = PLACEHOLDER) -> str | None:
    return pods(cluster, PLACEHOLDER_NAMESPACE).get(name, {}).get("status", {}).get("phase")


def pods(cluster: LocalCluster, namespace: str, store: bool = False) -> dict[str, dict[str, Any]]:
    """The namespace's pods by name: the world's and the tests' own, and with `store` the
    rendezvous store's too (a Deployment's pod, which runs beside the world and outlives it)."""
    items = _read_json(cluster, API_PATHS["pod"].format(namespace=namespace))["items"]
    return {pod["metadata"]["name"]: pod for pod in items if store or not is_store_pod(pod)}


def bound(cluster: LocalCluster, namespace: str = NAMESPACE) -> list[str]:
    """The namespace's pods (the world's and the tests' own, not the store's) that a scheduler has placed on a node."""
    return [name for name, pod in pods(cluster, namespace).items() if pod["spec"].get("nodeName")]


def is_store_pod(pod: dict[str, Any]) -> bool:
    return pod["metadata"].get("labels", {}).get("app.kubernetes.io/instance") == STORE


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


def logs(cluster: LocalCluster, namespace: str, pod: str, previous: bool = False, timestamps: bool = False) -> str:
    """The pod's trainer log ("" where it has none yet, or no longer)."""
    query = {"container": "trainer", **({"previous": "true"} if previous else {}), **({"timestamps": "true"} if timestamps else {})}
    status, body = cluster.api_read(f"{API_PATHS['pod'].format(namespace=namespace)}/{pod}/log", **query)
    return body.decode(errors="replace") if status == 200 else ""


def all_logs(cluster: LocalCluster, namespace: str, pod: str) -> str:
    """The pod's trainer log, the previous container's first (a StatefulSet restarts a finished one)."""
    return logs(cluster, namespace, pod, previous=True) + logs(cluster, namespace, pod)


def timestamped_logs(cluster: LocalCluster, pod: str) -> list[tuple[datetime, str]]:
    """The pod's current trainer log, each line with the time the runtime read it (ns resolution)."""
    rows = []
    for row in logs(cluster, NAMESPACE, pod, timestamps=True).splitlines():
        stamp, _, text = row.partition(" ")
        try:
            rows.append((datetime.fromisoformat(stamp), text))
        except ValueError:  # no log: the kubelet's answer for a container gone ("unable to retrieve container logs ...")
            return []
    return rows


def reform_timeline(cluster: LocalCluster, lost_at: datetime, replaced: list[int]) -> dict[str, float | None]:
    """Where a re-form's time went: seconds from the loss to each step the world took back to
    training, read from the pods (their API times have a second's resolution) and their logs.
    `replaced`: the indices whose pods were replaced."""
    def since(moment: datetime | str | None) -> float | None:
        if moment is None:
            return None
        moment = datetime.fromisoformat(moment) if isinstance(moment, str) else moment
        return round((moment - lost_at).total_seconds(), 1)

    def first_at(rows: list[tuple[datetime, str]], prefix: str, after: datetime = lost_at) -> datetime | None:
        return next((at for at, text in rows if at > after and text.startswith(prefix)), None)

    found = world_pods(cluster)
    timeline: dict[str, float | None] = {}
    for index in replaced:
        pod = found[index]
        rows = timestamped_logs(cluster, pod["metadata"]["name"])
        created = since(pod["metadata"]["creationTimestamp"])
        timeline[f"pod {index} created"] = created if created >= 0 else None  # None: kept, its container restarted
        timeline[f"pod {index} container started"] = since(pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"])
        timeline[f"pod {index} entrypoint's first line"] = since(rows[0][0]) if rows else None
        timeline[f"pod {index} torchrun started"] = since(first_at(rows, "[DDP] torchrun "))
    for index in sorted(set(found) - set(replaced) - {0}):  # a survivor re-joins when pod 0 (the store's host) is lost
        rows = timestamped_logs(cluster, found[index]["metadata"]["name"])
        timeline[f"pod {index} [HANG] line"] = since(first_at(rows, "[HANG]"))
        rejoined = first_at(rows, "[DDP] re-joining")
        timeline[f"pod {index} re-joining"] = since(rejoined)
        timeline[f"pod {index} torchrun started again"] = since(rejoined and first_at(rows, "[DDP] torchrun ", after=rejoined))
    rows = timestamped_logs(cluster, found[0]["metadata"]["name"])
    timeline["rank 0 in the process group"] = since(first_at(rows, "[DDP] process global_rank=0 "))
    resumed = first_at(rows, "[CKPT] resumed from ")
    timeline["checkpoint loaded"] = since(resumed)
    timeline["first [TRAIN] line"] = since(first_at(rows, "[TRAIN] ", after=resumed or lost_at))
    return timeline


def print_reform_timeline(cluster: LocalCluster, what: str, lost_at: datetime, replaced: list[int]) -> None:
    """reform_timeline once the re-formed world has logged its first step, printed for the docs."""
    timeline = wait_for(lambda: (t := reform_timeline(cluster, lost_at, replaced))["first [TRAIN] line"] and t, 120,
                        "the re-formed world's first [TRAIN] line")  # fmt: skip
    print(f"\n[figures] {what}, seconds after the loss: {timeline}")


def final_done_lines(cluster: LocalCluster) -> list[dict[str, str]]:
    """The last [DONE] line of each pod of the world that has logged one."""
    each_pods = (done_lines(all_logs(cluster, NAMESPACE, pod["metadata"]["name"])) for pod in world_pods(cluster).values())
    return [lines[-1] for lines in each_pods if lines]


def exec_python(cluster: LocalCluster, namespace: str, pod: str, code: str) -> str:
    """Runs Python in the pod's trainer container (as the container's user) and returns stdout."""
    return cluster.kubectl("exec", pod, "-n", namespace, "-c", "trainer", "--", "python", "-c", code).stdout


def job_condition(cluster: LocalCluster, namespace: str = NAMESPACE) -> str | None:
    """Complete or Failed once the dev stack's Job (in `namespace`) has ended, else None."""
    conditions = get(cluster, "job", WORKLOAD, namespace).get("status", {}).get("conditions") or []
    return next((c["type"] for c in conditions if c["type"] in ("Complete", "Failed") and c["status"] == "True"), None)


def jobset_status(cluster: LocalCluster) -> dict[str, Any]:
    return get(cluster, "jobset", WORKLOAD, NAMESPACE).get("status", {})


def terminal_state(cluster: LocalCluster) -> str | None:
    """Completed or Failed once the dev stack's JobSet has ended, else None."""
    return jobset_status(cluster).get("terminalState")


def run_dir(cluster: LocalCluster) -> Path:
    """The dev run's directory, /out/<run>, on this machine."""
    return claim_path(cluster, NAMESPACE, "outputs-pvc") / RUN


def newest_checkpoint(cluster: LocalCluster) -> dict[str, Any]:
    """The commit record of the run's newest checkpoint, or {"step": -1} before the first."""
    records = sorted((run_dir(cluster) / "checkpoints").glob("ckpt-*.json"))
    return json.loads(records[-1].read_text()) if records else {"step": -1}


def wait_for_checkpoint_after(cluster: LocalCluster, step: int, timeout: float = 300) -> dict[str, Any]:
    return wait_for(lambda: (r := newest_checkpoint(cluster))["step"] > step and r, timeout,
                    f"a checkpoint after step {step}", interval=1)  # fmt: skip


def pod_resumed_lines(cluster: LocalCluster, index: int = 0) -> list[str]:
    """The [CKPT] resumed lines of the world's pod `index` (pod 0 holds global rank 0, which logs for
    the world); none between a pod and its replacement."""
    found = world_pods(cluster)
    if index not in found:
        return []
    return resumed_lines(all_logs(cluster, NAMESPACE, found[index]["metadata"]["name"]))


def resumed_step(line: str) -> int:
    """The global step of the checkpoint a `[CKPT] resumed` line names."""
    return Resumed.parse(line).global_step


def wait_for_reform(cluster: LocalCluster, seen: int, timeout: float = 300) -> tuple[str, float]:
    """Waits until pod 0 logs a resume beyond the first `seen` of its pod; returns it and the seconds taken."""
    started = time.monotonic()
    line = wait_for(lambda: (lines := pod_resumed_lines(cluster))[seen:] and lines[-1], timeout, "the world to re-form", interval=1)
    return line, time.monotonic() - started


def container_processes(cluster: LocalCluster, pod: str) -> dict[int, int]:
    """Every process of the pod's container, seen from the node (its cgroup): pid -> parent pid."""
    status = get(cluster, "pod", pod, NAMESPACE)["status"]["containerStatuses"][0]
    container_id = status["containerID"].split("://", 1)[1]
    inside = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if container_id in (proc / "cgroup").read_text():
                inside[int(proc.name)] = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue
    return inside


def container_pid(cluster: LocalCluster, pod: str) -> int:
    """PID 1 of the pod's container: of the processes in its cgroup, the one whose parent (the shim) is not."""
    inside = container_processes(cluster, pod)
    first = [pid for pid, parent in inside.items() if parent not in inside]
    assert len(first) == 1, f"pod {pod}'s container: processes {inside}"
    return first[0]


def training_processes(cluster: LocalCluster, pod: str) -> list[int]:
    """The pod's training processes (torchrun's workers), seen from the node."""
    return [pid for pid in container_processes(cluster, pod) if is_training_process(pid)]


def freeze_training(cluster: LocalCluster, pod: str) -> list[int]:
    """SIGSTOP to the pod's training processes from the node, as a stuck GPU or host leaves them:
    torchrun and the entrypoint still run. Returns their pids."""
    frozen = training_processes(cluster, pod)
    assert frozen, f"no training process in pod {pod}"
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    return frozen


def freeze_container(cluster: LocalCluster, pod: str) -> list[int]:
    """SIGSTOP to every process of the pod's container at once, from the node: the entrypoint,
    torchrun and the workers, as a container stuck whole is, while the kubelet and the node run on.
    Returns their pids (SIGCONT undoes it)."""
    frozen = list(container_processes(cluster, pod))
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    return frozen


def kill_container(cluster: LocalCluster, pod: str) -> None:
    """SIGKILL to the container's PID 1 from the node, as the kernel's OOM killer or a crashed runtime
    would: with the trainer image, the entrypoint, and with it torchrun, the store (in pod 0) and the workers."""
    os.kill(container_pid(cluster, pod), signal.SIGKILL)


def claim_path(cluster: LocalCluster, namespace: str, claim: str) -> Path:
    """The directory on this machine behind a bound claim (the cluster's local volumes)."""
    volume = get(cluster, "pvc", claim, namespace)["spec"]["volumeName"]
    pv = json.loads(cluster.kubectl("get", "pv", volume, "-o", "json").stdout)
    return Path(pv["spec"]["local"]["path"])


class LogStream:
    """`kubectl logs -f` of one pod into a file, from now until the pod is gone.

    A context manager: leaving it ends the kubectl process, whatever failed before `text`.
    """

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
            self.close()
        return self.path.read_text(errors="replace")

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
        self._file.close()

    def __enter__(self) -> "LogStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def status_view(cluster: LocalCluster, command: str) -> str:
    """What the stack's `statusCommand` output prints when run, as a user would, from the project."""
    done = subprocess.run([*command.split(), "--kubeconfig", cluster.kubeconfig], cwd=REPO, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, f"{command} failed:\n{done.stderr}"
    return done.stdout


def host_state(cluster_name: str) -> dict[str, list[str]]:
    """What a cluster must not change on this machine: its links, routes, firewall, mounts and its
    own cgroups (another cluster of the run may start or stop meanwhile, in another worker)."""
    def run(*argv: str) -> list[str]:
        return sorted(subprocess.run(argv, capture_output=True, text=True, check=True).stdout.splitlines())

    mounts = sorted(line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines())
    return {
        "links": [line.split(":")[1].strip() for line in run("ip", "-o", "link")],
        "routes": run("ip", "route"),
        "iptables": [line for line in run("iptables-save") if not line.startswith("#")],
        "mounts": mounts,
        "cgroups": sorted(str(p) for m in cgroup_mounts() for p in m.glob(f"ddp-infra-{cluster_name}")),
    }


# Which pod trains as which rank, and which wait as spares: decided as pods join (a pod of the
# world that re-joins may itself end up waiting as a spare), so read from the pods' logs and the
# rendezvous's own state in the store's pod.
_PROCESS = re.compile(r"^\[DDP\] process global_rank=(?P<rank>\d+) ")


def ranks(cluster) -> dict[int, str]:
    """The pod that holds each global rank in the newest world: the pod of that rank's newest
    `[DDP] process` line (every world logs one per rank)."""
    return {int(match["rank"]): name for _, name, text in logged(cluster) if (match := _PROCESS.match(text))}


def first_world_formed_at(lines: list[tuple[datetime, str, str]]) -> datetime | None:
    """When, in the world's `logged` lines, the first world's first process said its rank
    (`[DDP] process`): the rendezvous had formed."""
    return min((at for at, _, text in lines if _PROCESS.match(text)), default=None)


def spares_waiting(cluster) -> int:
    """How many pods wait in the rendezvous as spares: its redundancy list, read in the store's pod."""
    store, port = next((name, pod["spec"]["containers"][0]["ports"][0]["containerPort"])
                       for name, pod in pods(cluster, NAMESPACE, store=True).items() if is_store_pod(pod))  # fmt: skip
    run_id = next(var["value"] for var in next(iter(world_pods(cluster).values()))["spec"]["containers"][0]["env"]
                  if var["name"] == contract.RDZV_ID.name)  # fmt: skip
    code = (
        "import pickle, datetime; from torch.distributed import TCPStore; "
        "from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend as B; "
        f"s = TCPStore('127.0.0.1', {port}, is_master=False, timeout=datetime.timedelta(seconds=10)); "
        f"state = B(s, {run_id!r}).get_state(); "
        "print(len(pickle.loads(state[0]).redundancy_list) if state else 0)"
    )
    try:
        result = cluster.kubectl("exec", store, "-n", NAMESPACE, "-c", "store", "--", "python", "-c", code, check=False, timeout=20)
    except subprocess.TimeoutExpired as hung:
        # Seen once on Kubernetes 1.37 under the whole suite's load: the exec printed its answer
        # and its stream did not end. The answer counts; with none, the caller's poll asks again.
        printed = hung.stdout.decode() if isinstance(hung.stdout, bytes) else (hung.stdout or "")
        return int(printed.strip()) if printed.endswith("\n") and printed.strip().isdigit() else 0
    return int(result.stdout.strip() or 0) if result.returncode == 0 else 0


def logged(cluster) -> list[tuple[datetime, str, str]]:
    """(time, pod, line) of every line of the world's pods' logs, in time order: the failed ones'
    too (a pod of the last world ends Failed when the Job, complete at its first success, stops it)."""
    return sorted((at, name, text) for name in pods(cluster, NAMESPACE) for at, text in timestamped_logs(cluster, name))


def resumes(cluster) -> list[tuple[datetime, str]]:
    """Every `[CKPT] resumed` line of the pods' current logs with its time (rank 0 logs one per world)."""
    return [(at, text) for at, _, text in logged(cluster) if text.startswith("[CKPT] resumed")]


def wait_for_the_job_and_both_ranks_done(cluster, timeout: float = 900) -> tuple[str, dict[str, dict[str, str]]]:
    """The Job's end (Complete or Failed) and the [DONE] line of each of the final world's two ranks."""
    ended = JobAndRanksDone(cluster, NAMESPACE)
    return wait_for(ended, timeout, "the Job to end, both ranks' [DONE] lines read", interval=0.5), ended.done


class JobAndRanksDone:
    """A look at the dev stack's Job in `namespace` that reads each rank's [DONE] line as it comes: each
    rank says [DONE] before the world leaves together; the Job, complete at its first pod's success,
    then deletes the pods still running, logs and all. Called, the Job's end once both ranks' lines
    are read (or the reason they never will be), else None."""

    def __init__(self, cluster, namespace: str):
        self.cluster, self.namespace = cluster, namespace
        self.done: dict[str, dict[str, str]] = {}

    def __call__(self) -> str | None:
        found = pods(self.cluster, self.namespace)
        for name in found:
            self.done.update((line["rank"], line) for line in done_lines(all_logs(self.cluster, self.namespace, name)))
        ended = job_condition(self.cluster, self.namespace)
        if ended != "Complete" or sorted(self.done) == ["0", "1"]:
            return ended
        return None if any(running(pod) for pod in found.values()) else f"Complete, [DONE] read of ranks {sorted(self.done)} only"
