"""The names the program gives things: the leaf every other module of ddp_infra looks down on.

What a pod of the world is made of (its container, volumes and mounts), the labels and
annotations the program owns, and the resources it requests by name. The trainer's side of the
same names (mount paths, env) is `trainer/contract.py`; the ones here are Kubernetes' side only.
"""

from __future__ import annotations

from trainer import contract

PROJECT = "ddp-infra"  # the Pulumi project, and the namespace of its config keys
JOBSET_API_VERSION = "jobset.x-k8s.io/v1alpha2"  # the JobSet controller's API (`workload.kind: jobset`)
# The Workload API, the Kubernetes scheduler's gang (`scheduling.gang.scheduler: kubernetes`).
WORKLOAD_API_BETA = "scheduling.k8s.io/v1beta1"  # Kubernetes 1.37
WORKLOAD_API_ALPHA = "scheduling.k8s.io/v1alpha2"  # Kubernetes 1.36

# --- the trainer pod ----------------------------------------------------------------------------
CONTAINER_NAME = "trainer"
# The init container that fills the datasets claim from storage.datasets.source (trainer/fetch.py).
FETCH_CONTAINER_NAME = "fetch-data"
PROGRAM_CONTAINERS = (CONTAINER_NAME, FETCH_CONTAINER_NAME)
RENDEZVOUS_PORT_NAME = "rdzv"
LIVENESS_PORT_NAME = "liveness"
# The claims' volumes by role, and where each is mounted in the trainer container.
CLAIM_MOUNTS = {"datasets": contract.DATA_MOUNT, "outputs": contract.OUT_MOUNT, "models": contract.MODELS_MOUNT}
SHM_VOLUME, TMP_VOLUME = "dshm", "tmp"
PROGRAM_VOLUMES = (*CLAIM_MOUNTS, SHM_VOLUME, TMP_VOLUME)
PROGRAM_MOUNT_PATHS = (*CLAIM_MOUNTS.values(), contract.SHM_MOUNT, contract.TMP_MOUNT)
# Env the program sets itself besides the contract's names: the root filesystem is read-only.
PROGRAM_ENV = {"HOME": contract.TMP_MOUNT}
HF_TOKEN_SECRET_KEY = "token"

# --- labels and annotations ---------------------------------------------------------------------
# The prefix the program owns: selectors and the recommended labels live here.
RESERVED_LABEL_PREFIX = "app.kubernetes.io/"
APP_NAME = "ddp-trainer"
# Every object the program makes says whose it is.
OWNERSHIP_LABELS = {"app.kubernetes.io/part-of": PROJECT, "app.kubernetes.io/managed-by": "pulumi"}
# What `pulumi up` waits for on an object, in place of the provider's own readiness check.
WAIT_FOR_ANNOTATION = "pulumi.com/waitFor"
# What an operator puts on a lost node so that its pods are deleted and replaced (Kubernetes' non-graceful node shutdown).
OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"
# The digest of the secret values the pods read, on their template, so that a changed one restarts them (secrets_digest.py).
SECRETS_DIGEST_ANNOTATION = "ddp-infra.dev/secrets-sha256"
# Multus's annotation naming a pod's secondary networks (NetworkAttachmentDefinitions).
SECONDARY_NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"

# --- resources ----------------------------------------------------------------------------------
GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_RDMA_RESOURCE = "rdma/hca_shared_devices_a"  # the k8s-rdma-shared-dev-plugin's usual name
