"""The env contract between the Pulumi program (ddp_infra) and the training image (trainer).

This module is the one place where the names of the environment variables a training pod
receives are written down, and the defaults and rules both sides read. The Pulumi program imports
it to build the pod env; the image's entrypoint imports it to read that env. It uses the standard library only, so the image
needs nothing from the infrastructure side and the infrastructure nothing from torch.

Meanings (one meaning each, everywhere):
- a *node* is one pod; NNODES is the number of pods of the workload, or MIN:MAX for an elastic
  world, which trains at any size in that range (torchrun's own --nnodes MIN:MAX);
- NPROC_PER_NODE is the number of training processes torchrun starts in each pod
  (one per GPU on a GPU pod);
- WORLD_SIZE is the number of training processes in the whole job,
  NNODES x NPROC_PER_NODE (the same meaning torch.distributed gives it; an elastic world's is a
  range too, MIN x NPROC_PER_NODE:MAX x NPROC_PER_NODE, and torchrun gives each process the size
  of the world it is in);
- NODE_RANK is the pod's index, 0 .. NNODES-1 (0 .. NNODES+SPARE_PODS-1 with spare pods, which
  wait to take a lost pod's place). A process's global RANK is set by torchrun, never by the pod
  env, so the two cannot be confused.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# Kubernetes puts a StatefulSet pod's ordinal in this label (1.28+) and an Indexed Job pod's
# completion index in this annotation and in the JOB_COMPLETION_INDEX variable (a JobSet's pods
# are an Indexed Job's: they get both).
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
JOB_COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"

# --- defaults and rules both sides read -------------------------------------------------------
# Each is written here once: the stack's config (ddp_infra/config) takes it as its default or bound,
# and the pod (trainer/pod/env.py, trainer/hang_watch.py) falls back on it where a variable is
# unset, so the two cannot drift apart (tests/test_contract_defaults.py holds both sides to it).

# The rendezvous's timeouts, in seconds (last call and close are torchrun's own).
READ_TIMEOUT_SECONDS = 120  # torchrun's own 60 s is too short for slow pod starts
LAST_CALL_TIMEOUT_SECONDS = 30
CLOSE_TIMEOUT_SECONDS = 30
# torchrun's own 5 s (x 3 missed beats) keeps a lost pod in the rendezvous, and its replacement
# out of the next world, for 15 s; here it is 1 s x KEEP_ALIVE_MAX_ATTEMPTS.
KEEP_ALIVE_INTERVAL_SECONDS = 1
# Heartbeats a pod may miss before the rendezvous counts it as gone, when the stack does not say.
# torchrun's 3 drops live pods: on a busy node a pod's heartbeat was seen 3.3 s old as its workers
# started, and the world re-formed without it.
KEEP_ALIVE_MAX_ATTEMPTS = 5
KEEP_ALIVE_MIN_ATTEMPTS = 2  # fewer would count a pod gone at its first late heartbeat
WORLD_MAX_RESTARTS = 3  # torchrun --max-restarts: restarts of the whole world before giving up
MASTER_WAIT_TIMEOUT_SECONDS = 600  # how long the preflight waits for pod 0's DNS name and port

# The join timeout is the one default the two sides mean differently. A pod the stack makes always
# carries RDZV_JOIN_TIMEOUT (the entrypoint refuses to start without it), so the stack's default is
# what its worlds wait; the pod's own value applies only to a seed-000 pod, which carries none, and
# is torchrun's own default, what a plain `torchrun` on that platform waits.
STACK_JOIN_TIMEOUT_SECONDS = 1800
SEED_000_JOIN_TIMEOUT_SECONDS = 600

# The hang watch (trainer/hang_watch.py): a rank without training progress for longer than its
# bound counts as hung. 0 as the ceiling turns the watch off.
HANG_FLOOR_SECONDS = 30
HANG_CEILING_SECONDS = 120
HANG_STEP_TIME_FACTOR = 10
HANG_BOUND_RULE = f"the bound is {HANG_STEP_TIME_FACTOR} x the slowest recent step, kept between the floor and the ceiling"


def hang_bound(floor_s: float, ceiling_s: float, slowest_step_s: float | None) -> float:
    """Seconds without progress that count as a hang (HANG_BOUND_RULE); the floor before a step was timed."""
    derived = HANG_STEP_TIME_FACTOR * slowest_step_s if slowest_step_s is not None else floor_s
    return min(ceiling_s, max(floor_s, derived))


def store_on_pod_0(backend: str | None, apart: bool) -> bool:
    """Whether node 0's torchrun agent hosts the rendezvous store, so that no world forms without pod 0.

    static's store always is; c10d's unless it is `apart` (the stack's `rendezvous.store: own-pod`,
    the pod's RDZV_ENDPOINT other than MASTER_ADDR:MASTER_PORT); etcd-v2 keeps its own.
    """
    return backend == "static" or (backend == "c10d" and not apart)


# The container paths of the three volumes.
DATA_MOUNT = "/data"
OUT_MOUNT = "/out"
MODELS_MOUNT = "/models"
SHM_MOUNT = "/dev/shm"
# The image's writable directory (and HOME) on a read-only root filesystem.
TMP_MOUNT = "/tmp"
# Where the RDMA device plugin puts the InfiniBand verbs devices (uverbs*, rdma_cm) in a pod.
INFINIBAND_DEVICES = "/dev/infiniband"

# Workload kinds, as WORKLOAD_KIND carries them.
STATEFULSET = "statefulset"
INDEXED_JOB = "job"
JOBSET = "jobset"  # a JobSet (jobset.x-k8s.io) of one Indexed Job
WORKLOAD_KINDS = (STATEFULSET, INDEXED_JOB, JOBSET)
# The JobSet's one replicated Job, named as Kubeflow Trainer's torch runtime names its own.
JOBSET_REPLICATED_JOB = "node"

# Rendezvous backends torchrun accepts, as RDZV_BACKEND carries them.
RDZV_BACKENDS = ("c10d", "static", "etcd-v2")


@dataclass(frozen=True)
class EnvVar:
    name: str
    meaning: str
    required: bool = True  # the entrypoint refuses to start without it


# --- the world's shape -------------------------------------------------------------------
NNODES = EnvVar("NNODES", "number of pods in the job, or MIN:MAX for an elastic world")
NPROC_PER_NODE = EnvVar("NPROC_PER_NODE", "training processes per pod (GPUs per pod on GPU nodes)")
WORLD_SIZE = EnvVar("WORLD_SIZE", "training processes in the job: NNODES x NPROC_PER_NODE (a range where NNODES is one)")
NODE_RANK = EnvVar(
    "NODE_RANK",
    f"the pod's index, from the {POD_INDEX_LABEL} label (StatefulSet) or the completion index "
    "(Indexed Job, JobSet); may be empty on clusters without the label, then the hostname ordinal is used",
    required=False,
)
SPARE_PODS = EnvVar(
    "SPARE_PODS",
    "pods beyond NNODES that wait in the rendezvous and take a lost pod's place at once (unset: 0); the first "
    "NNODES to join train, whichever their index",
    required=False,
)

# --- rendezvous ----------------------------------------------------------------------------
MASTER_ADDR = EnvVar(
    "MASTER_ADDR",
    "pod 0's name under the headless Service, <pod 0's hostname>.<service>, resolved through the pod's search path",
)
MASTER_PORT = EnvVar("MASTER_PORT", "rendezvous / TCPStore port on pod 0")
RDZV_BACKEND = EnvVar("RDZV_BACKEND", f"torchrun rendezvous backend, one of {', '.join(RDZV_BACKENDS)}")
RDZV_ID = EnvVar("RDZV_ID", "rendezvous id unique to the stack, so two jobs never join each other")
RDZV_ENDPOINT = EnvVar(
    "RDZV_ENDPOINT",
    "host:port of the rendezvous store; defaults to MASTER_ADDR:MASTER_PORT (pod 0 hosts it); another address is a store "
    "of its own (RENDEZVOUS_STORE_COMMAND) that every pod waits for",
    required=False,
)
RDZV_JOIN_TIMEOUT = EnvVar("RDZV_JOIN_TIMEOUT", "seconds torchrun waits for the whole world to join")
RDZV_READ_TIMEOUT = EnvVar("RDZV_READ_TIMEOUT", "seconds a c10d store read may take", required=False)
RDZV_LAST_CALL_TIMEOUT = EnvVar(
    "RDZV_LAST_CALL_TIMEOUT", "seconds to wait for late joiners once the minimum is reached", required=False
)
RDZV_CLOSE_TIMEOUT = EnvVar("RDZV_CLOSE_TIMEOUT", "seconds to wait for the rendezvous to close", required=False)
RDZV_KEEP_ALIVE_INTERVAL = EnvVar(
    "RDZV_KEEP_ALIVE_INTERVAL",
    "seconds between a pod's rendezvous heartbeats; a pod that misses RDZV_KEEP_ALIVE_MAX_ATTEMPTS of them counts as "
    "gone and its replacement is let in",
    required=False,
)
RDZV_KEEP_ALIVE_MAX_ATTEMPTS = EnvVar(
    "RDZV_KEEP_ALIVE_MAX_ATTEMPTS",
    f"heartbeats a pod may miss before the rendezvous counts it as gone (torchrun's keep_alive_max_attempt); unset: "
    f"{KEEP_ALIVE_MAX_ATTEMPTS}",
    required=False,
)
MAX_RESTARTS = EnvVar("MAX_RESTARTS", "torchrun --max-restarts: restarts of the whole world before giving up")
MASTER_WAIT_TIMEOUT = EnvVar(
    "MASTER_WAIT_TIMEOUT", "seconds the preflight waits for pod 0's DNS name and port", required=False
)
SHUTDOWN_TIMEOUT = EnvVar(
    "SHUTDOWN_TIMEOUT",
    "seconds torchrun gives its workers after SIGTERM (to checkpoint) before SIGKILL: the pod's "
    "termination grace period less a margin",
    required=False,
)

# --- the pod's identity (downward API) -----------------------------------------------------
POD_NAME = EnvVar("POD_NAME", "metadata.name of the pod")
POD_NAMESPACE = EnvVar("POD_NAMESPACE", "metadata.namespace of the pod")
SVC_NAME = EnvVar("SVC_NAME", "name of the headless rendezvous Service")
WORKLOAD_KIND = EnvVar("WORKLOAD_KIND", f"which workload runs the pods: {' or '.join(WORKLOAD_KINDS)}")
WORKLOAD_NAME = EnvVar("WORKLOAD_NAME", "name of the StatefulSet, Job or JobSet")

# --- outputs and resources -----------------------------------------------------------------
RUN_NAME = EnvVar("RUN_NAME", "run directory under /out; stable across restarts so a restart resumes")
DATA_DIR = EnvVar("DATA_DIR", "where datasets are mounted", required=False)
OUT_DIR = EnvVar("OUT_DIR", "where outputs and checkpoints are written", required=False)
MODELS_DIR = EnvVar("MODELS_DIR", "where local models are mounted (optional volume)", required=False)


def claim_dir(var: EnvVar, mount: str) -> Path:
    """Where this process finds a claim: the directory `var` names (the program sets it), else `mount`."""
    return Path(os.environ.get(var.name) or mount)


SHM_SIZE_BYTES = EnvVar("SHM_SIZE_BYTES", "size of the memory-backed /dev/shm the pod was given", required=False)
GPUS_PER_NODE = EnvVar("GPUS_PER_NODE", "nvidia.com/gpu the pod asked for; 0 on CPU pods", required=False)

# --- network -------------------------------------------------------------------------------
NCCL_SOCKET_IFNAME = EnvVar("NCCL_SOCKET_IFNAME", "interface NCCL binds; chosen by the preflight if unset", required=False)
GLOO_SOCKET_IFNAME = EnvVar("GLOO_SOCKET_IFNAME", "interface Gloo binds; chosen by the preflight if unset", required=False)
NCCL_IB_DISABLE = EnvVar(
    "NCCL_IB_DISABLE", "1 turns InfiniBand off; 0 asks for it, and the preflight then needs /dev/infiniband", required=False
)
NCCL_IB_HCA = EnvVar("NCCL_IB_HCA", "the InfiniBand HCAs NCCL may use, e.g. mlx5 or =mlx5_0:1 (unset: all)", required=False)
NCCL_IB_GID_INDEX = EnvVar("NCCL_IB_GID_INDEX", "the GID index NCCL uses on RoCE (unset: NCCL's default)", required=False)
NCCL_DEBUG = EnvVar("NCCL_DEBUG", "NCCL log level", required=False)
TORCH_NCCL_ASYNC_ERROR_HANDLING = EnvVar(
    "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1: a failed collective aborts instead of hanging", required=False
)

# --- secrets -------------------------------------------------------------------------------
HF_TOKEN = EnvVar("HF_TOKEN", "Hugging Face token, from the Secret (optional)", required=False)
HUGGINGFACE_HUB_TOKEN = EnvVar("HUGGINGFACE_HUB_TOKEN", "the same token under its older name", required=False)

# --- torchrun's own variables (PET_<FLAG>), mirrored so a plain `torchrun script.py` works --
PET_NNODES = EnvVar("PET_NNODES", "= NNODES")
PET_NPROC_PER_NODE = EnvVar("PET_NPROC_PER_NODE", "= NPROC_PER_NODE")
PET_NODE_RANK = EnvVar("PET_NODE_RANK", "= NODE_RANK", required=False)
PET_MASTER_ADDR = EnvVar("PET_MASTER_ADDR", "= MASTER_ADDR")
PET_MASTER_PORT = EnvVar("PET_MASTER_PORT", "= MASTER_PORT")
PET_RDZV_BACKEND = EnvVar("PET_RDZV_BACKEND", "= RDZV_BACKEND")
PET_RDZV_ENDPOINT = EnvVar("PET_RDZV_ENDPOINT", "= MASTER_ADDR:MASTER_PORT")
PET_RDZV_ID = EnvVar("PET_RDZV_ID", "= RDZV_ID")
PET_MAX_RESTARTS = EnvVar("PET_MAX_RESTARTS", "= MAX_RESTARTS")

# --- the hang watch (trainer/hang_watch.py) --------------------------------------------------
HANG_TIMEOUT_FLOOR = EnvVar(
    "HANG_TIMEOUT_FLOOR",
    f"seconds: the least time without training progress that counts as a hang ({HANG_BOUND_RULE})",
    required=False,
)
HANG_TIMEOUT_CEILING = EnvVar(
    "HANG_TIMEOUT_CEILING",
    "seconds: the most time without training progress before the world is torn down and re-formed from its "
    "newest checkpoint; 0 turns hang detection off",
    required=False,
)

# --- the pod's liveness (trainer/pod/liveness.py) --------------------------------------------
LIVENESS_PORT = EnvVar(
    "LIVENESS_PORT",
    "port on which the entrypoint answers the kubelet's liveness probe (GET /healthz): a pod whose every process "
    "is frozen answers nothing, and the kubelet kills it; unset: nothing answers (no probe)",
    required=False,
)

# --- what the stack sets unless the user's own env (the stack's `env` map) does ------------------
# The threads each training process computes on (torch's intra-op threads): the pod's CPU, its
# limit or else its request, shared among its NPROC_PER_NODE processes, at least 1. The training
# line `[DDP] process ...` says how many a process got.
OMP_NUM_THREADS = "OMP_NUM_THREADS"

# --- what the user's own env (the stack's `env` map) or the image sets, and the trainer reads -----
# Plain names, not EnvVars: the stack never sets them, and a user may.
HF_HOME = "HF_HOME"  # the Hugging Face cache; the image puts it under /tmp
MLFLOW_TRACKING_URI = "MLFLOW_TRACKING_URI"  # an http(s) MLflow server: run tracking (trainer/tracking/mlflow_run.py)
MLFLOW_EXPERIMENT_NAME = "MLFLOW_EXPERIMENT_NAME"
MLFLOW_TRACKING_TOKEN = "MLFLOW_TRACKING_TOKEN"
MLFLOW_TRACKING_USERNAME = "MLFLOW_TRACKING_USERNAME"
MLFLOW_TRACKING_PASSWORD = "MLFLOW_TRACKING_PASSWORD"
WANDB_API_KEY = "WANDB_API_KEY"  # W&B run tracking (trainer/tracking/wandb_run.py), a secretEnv
WANDB_MODE = "WANDB_MODE"  # offline: the run kept under /out/<run>/wandb/ to sync later; disabled: off
WANDB_PROJECT = "WANDB_PROJECT"
AWS_PREFIX = "AWS_"  # an s3:// data source's credentials and region as AWS's SDKs read them: also the fetch-data container's

# Every variable the pod env carries, in the order the Pulumi program emits them (the ones only
# some stacks set, like HF_TOKEN, come after the others: see ddp_infra/pod.py pod_env).
ALL: tuple[EnvVar, ...] = tuple(v for v in globals().values() if isinstance(v, EnvVar))
REQUIRED: tuple[str, ...] = tuple(v.name for v in ALL if v.required)

# The torchrun mirrors: each PET_ variable must equal the variable it mirrors.
PET_MIRRORS: dict[str, str] = {
    PET_NNODES.name: NNODES.name,
    PET_NPROC_PER_NODE.name: NPROC_PER_NODE.name,
    PET_NODE_RANK.name: NODE_RANK.name,
    PET_MASTER_ADDR.name: MASTER_ADDR.name,
    PET_MASTER_PORT.name: MASTER_PORT.name,
    PET_RDZV_BACKEND.name: RDZV_BACKEND.name,
    PET_RDZV_ID.name: RDZV_ID.name,
    PET_MAX_RESTARTS.name: MAX_RESTARTS.name,
}

# The variables of seed guide 000's platform, which the entrypoint also accepts when the pod
# was not made by this program (POD_NUMS is the number of pods, POD_PORT the master port).
LEGACY_POD_NUMS = "POD_NUMS"
LEGACY_POD_PORT = "POD_PORT"
LEGACY_JOB_NAME = "JOB_NAME"
JOB_COMPLETION_INDEX = "JOB_COMPLETION_INDEX"  # set by Kubernetes in every Indexed Job pod


def range_text(minimum: int, maximum: int) -> str:
    """NNODES or WORLD_SIZE as the pods and torchrun read them: "4", or an elastic world's "2:4"."""
    return f"{minimum}:{maximum}" if minimum < maximum else str(maximum)


def parse_range(text: str) -> tuple[int, int] | None:
    """(MIN, MAX) of range_text's "N" (MIN = MAX = N) or "MIN:MAX" with 1 <= MIN < MAX; None otherwise."""
    parts = text.strip().split(":")
    if len(parts) > 2 or not all(part.isascii() and part.isdigit() for part in parts):
        return None
    minimum, maximum = int(parts[0]), int(parts[-1])
    if minimum < 1 or (len(parts) == 2 and minimum >= maximum):
        return None
    return minimum, maximum


def pod_hostname(kind: str, workload_name: str, index: int) -> str:
    """The hostname Kubernetes gives the workload's pod `index`.

    A StatefulSet's pod and an Indexed Job's are `<workload>-<index>`. A JobSet's pod is its
    Job's: the Job is `<jobset>-<replicated job>-<job index>`, and the JobSet here has one.
    """
    if kind == JOBSET:
        return f"{workload_name}-{JOBSET_REPLICATED_JOB}-0-{index}"
    return f"{workload_name}-{index}"


def master_dns_name(workload_name: str, service_name: str, kind: str = STATEFULSET) -> str:
    """Pod 0's stable DNS name behind the headless Service, in the short form JobSet uses.

    A pod's resolver completes it through its search path (`<namespace>.svc.<cluster domain>`),
    so it resolves on a cluster of any domain, where a written-out `svc.cluster.local` would not.
    """
    return f"{pod_hostname(kind, workload_name, 0)}.{service_name}"


# --- the training image (trainer/Dockerfile) ------------------------------------------------
# The user the image runs as; the pod's runAsUser / runAsGroup / fsGroup must match.
IMAGE_UID = 1000
IMAGE_GID = 1000
# The container command and the default args (what a user would write after `torchrun`).
ENTRYPOINT_COMMAND: tuple[str, ...] = ("python", "-m", "trainer.entrypoint")
# The rendezvous store's pod (`rendezvous.store: own-pod`) runs this, with the port as its one argument.
RENDEZVOUS_STORE_COMMAND: tuple[str, ...] = ("python", "-m", "trainer.pod.rendezvous_store")
DEFAULT_TRAIN_ARGS: tuple[str, ...] = (
    "-m", "trainer.train", "smoke",
    "--epochs", "2", "--batch", "256", "--samples", "4096", "--features", "128", "--classes", "4",
    "--lr", "3e-3", "--seed", "42",
)  # fmt: skip
# The entrypoint's answer to the kubelet's liveness probe, on LIVENESS_PORT (ddp_infra/pod.py probes it).
LIVENESS_PATH = "/healthz"
# Exit statuses of the entrypoint before it execs torchrun (after that, torchrun's own).
EXIT_BAD_ENV = 2  # the pod env does not describe a world; the message lists every problem
EXIT_PREFLIGHT_FAILED = 3  # the master never became reachable, or the pod lacks its GPUs
EXIT_TERMINATED = 143  # 128 + SIGTERM: stopped before torchrun started (a pod deleted while waiting)
