"""The config against a real API server, value by value: tricky values for every key that reaches a
Kubernetes object, each judged by the config and by kube-apiserver (a server-side dry run).

What the config accepts, the API server admits without a warning. What the config refuses is
answered with its key, its value and what is allowed; where the API server would have admitted it
(tried by putting the value where a value the config accepts, the key's stand-in, lands in the
objects), the candidate says why the config is stricter: the kubelet refuses it, or the program
needs more than Kubernetes does.
"""

from __future__ import annotations

import functools
import http.client
import importlib.util
import json
import re
import ssl
import threading
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Optional

import pytest

import infra_harness as harness
from ddp_infra.config.stack import MAX_ANNOTATION_BYTES
from test_infra_config_errors import malformed
from toolchain.apiserver import LocalApiServer

SECRET_KEYS = ("hfToken", "secretEnv")

# Why the config refuses what the API server would admit.
KUBELET_IMAGE = "the kubelet refuses it (InvalidImageName): distribution/reference's grammar, repository lowercase"
SECRET_NAME = "it names a Secret, and a Secret's name is a DNS-1123 subdomain"
INT64 = "Kubernetes counts it in int64"
BELOW_A_MILLICORE = "the kubelet counts CPU in millicores: a smaller unit than m is rounded"
FRACTION_OF_A_BYTE = "a fraction of a byte"
UNSET_IS_THE_DEFAULT = "an empty name is no name: leave the key unset"
PROGRAM_BOUND = "the program's bound"
PROGRAM_PATH = "it mounts over one of the program's paths"
SHELL_NAME = "a name a shell and torchrun can pass on: letters, digits, '_'"
JOB_LABEL = "a label of the Job controller's, refused whatever the kind so a stack keeps its labels across kinds"
IN_A_POD = "the API server refuses it in a pod, not in a pod template: the workload's pods would never be created"
TRIMMED = "spaces around a quantity, which Kubernetes trims: write it without them"
READ_AS_ZERO = "Kubernetes reads it as 0"
KUBERNETES_OWN = "a resource in Kubernetes' own kubernetes.io/: no device plugin advertises one"
NODE_LABEL = "a node label's key (a label key): no node has any other"
PLAIN_PATH = "mount paths are kept to what every runtime takes: no spaces, no ':' (a volume spec's separator)"
QUANTITY_STRICTER = {" 1": TRIMMED, "1 ": TRIMMED, "e3": READ_AS_ZERO, "1e9999999": INT64, "10E": INT64, "8Ei": INT64}
# A candidate's stand_in where the key's would stand for more than the value (a mount's volume name
# is its volume's name too): the candidate is not tried on the API server.
NOT_TRIED = "not tried"


@dataclass(frozen=True)
class Key:
    """How a key's refused values are tried on the API server: the program is evaluated with
    `stand_in`, a value the config accepts, and the candidate is put wherever that lands.
    stand_in None: the program derives what it writes, or writes it where the API server takes
    any text (an env var, an argument), so a refused value is not tried there."""

    stand_in: Any = None
    context: tuple[tuple[str, Any], ...] = ()  # other keys the key needs, as config paths


def context(**changes: Any) -> tuple[tuple[str, Any], ...]:
    return tuple((path.replace("__", "."), value) for path, value in changes.items())


INFINIBAND = context(network__infiniband="true")
KUEUE = context(scheduling__gang__scheduler="kueue", scheduling__gang__queue="team-a")
NO_CPU_REQUEST = context(resources__requests={"memory": "2Gi"})
SMALL_SHM = context(shmSize="1", resources__requests={"cpu": "1"})

KEYS = {
    "nodes": Key(),
    "gpusPerNode": Key(),
    "procsPerNode": Key(),
    "image.name": Key("zz-stand-in:1"),
    "image.pullPolicy": Key("Always"),
    "image.pullSecrets": Key(["zz-secret"]),
    "namespace.name": Key("zz-namespace"),
    "storage.outputs.claimName": Key("zz-claim"),
    "storage.outputs.size": Key("777Mi"),
    "storage.outputs.storageClass": Key("zz-class"),
    "storage.outputs.accessMode": Key("ReadOnlyMany"),
    "hfToken": Key(),
    "resources.requests.cpu": Key("777m"),
    "resources.requests.memory": Key("777Mi"),
    "resources.limits.cpu": Key("7777m", NO_CPU_REQUEST),
    "resources.limits.memory": Key("7777Mi", SMALL_SHM),
    "resources.extended": Key({"zz.example.com/zz-device": "4711"}),
    "shmSize": Key("777Mi"),
    "network.socketIfname": Key(),
    "network.rdmaResources": Key({"zz.example.com/zz-rdma": 47}, INFINIBAND),
    "network.secondaryNetworks": Key(),
    "network.ibHca": Key(None, INFINIBAND),
    "network.ibGidIndex": Key(None, INFINIBAND),
    "network.ncclDebug": Key(),
    "rendezvous.port": Key(31337),
    "rendezvous.backend": Key(),
    "rendezvous.store": Key(),
    "rendezvous.endpoint": Key(None, context(rendezvous__backend="etcd-v2")),
    "rendezvous.joinTimeoutSeconds": Key(),
    "rendezvous.readTimeoutSeconds": Key(),
    "rendezvous.lastCallTimeoutSeconds": Key(),
    "rendezvous.closeTimeoutSeconds": Key(),
    "rendezvous.keepAliveIntervalSeconds": Key(),
    "rendezvous.keepAliveMaxAttempts": Key(),
    "rendezvous.masterWaitTimeoutSeconds": Key(),
    "rendezvous.maxRestarts": Key(),
    "run.name": Key(),
    "run.args": Key(),
    "workload.name": Key("zzworkload"),
    "workload.terminationGracePeriodSeconds": Key(37),
    "workload.maxUnavailable": Key(),
    "workload.backoffLimit": Key(37),
    "workload.sparePods": Key(),
    "workload.ttlSecondsAfterFinished": Key(4711),
    "workload.liveness.seconds": Key(),
    "workload.liveness.port": Key(31338),
    "workload.hangTimeout.floorSeconds": Key(),
    "workload.hangTimeout.ceilingSeconds": Key(),
    "scheduling.nodeSelector": Key({"zz.example.com/zz-node-key": "zz-node-value"}),
    "scheduling.tolerations": Key([{"key": "zz-taint-key", "operator": "Equal", "value": "zz-taint-value", "effect": "PreferNoSchedule"}]),
    "scheduling.affinity": Key(),
    "scheduling.priorityClassName": Key("zz-priority"),
    "scheduling.topologySpread.topologyKey": Key("zz.example.com/zz-zone"),
    "scheduling.topologySpread.maxSkew": Key(37),
    "scheduling.topologySpread.whenUnsatisfiable": Key("DoNotSchedule"),
    "scheduling.gang.queue": Key("zz-queue", context(scheduling__gang__scheduler="kueue")),
    "scheduling.gang.workloadPriorityClass": Key("zz-workload-priority", KUEUE),
    "scheduling.topology.level": Key("zz.example.com/zz-block", KUEUE),
    "scheduling.topology.mode": Key(None, KUEUE + context(scheduling__topology__level="zz.example.com/zz-block")),
    "scheduling.topology.slice.level": Key("zz.example.com/zz-rack", KUEUE + context(scheduling__topology__level="zz.example.com/zz-block",
                                                                                   scheduling__topology__slice__size=1)),
    "scheduling.topology.slice.size": Key(None, KUEUE + context(scheduling__topology__level="zz.example.com/zz-block",
                                                                scheduling__topology__slice__level="zz.example.com/zz-rack")),
    "labels": Key({"zz.example.com/zz-label-key": "zz-label-value"}),
    "annotations": Key({"zz.example.com/zz-annotation-key": "zz-annotation-value"}),
    "env": Key({"ZZ_ENV": "zz-env-value"}),
    "secretEnv": Key({"ZZ_SECRET_ENV": "zz-secret-value"}),
    "pod.runtimeClassName": Key("zz-runtime"),
    "pod.volumes": Key([{"name": "zz-volume", "emptyDir": {}}]),
    "pod.volumeMounts": Key([{"name": "tmp", "mountPath": "/zz-mount", "subPath": "zz-sub"}]),
    "pod.initContainers": Key([{"name": "zz-init", "image": "zz-init-image:1"}]),
    "pod.sidecars": Key([{"name": "zz-sidecar", "image": "zz-sidecar-image:1"}]),
    "pod.templatePatch": Key(),
}  # fmt: skip


@dataclass(frozen=True)
class Candidate:
    key: str
    value: Any
    stricter: Optional[str] = None  # why the config refuses a value the API server admits
    stand_in: Any = None  # in place of the key's, where the value has another shape

    @property
    def id(self) -> str:
        return f"{self.key}={json.dumps(self.value, ensure_ascii=False)[:60]}"


def each(key: str, values: list[Any], stricter: Optional[str] = None) -> list[Candidate]:
    return [Candidate(key, value, stricter) for value in values]


# Label keys (qualified names: an optional DNS prefix of at most 253 and '/', then 63) and values.
LABEL_KEYS = ["team", "T_e-a.m", "p" * 253 + "/" + "k" * 63]
NOT_LABEL_KEYS = ["", "-team", "team-", "Example.com/team", "example.com/", "/team", "a/b/c", "has space", "k" * 64,
                  "p" * 254 + "/k", "ünï", "team\n", "exa_mple.com/team"]  # fmt: skip
LABEL_VALUES = ["", "v" * 63, "V_a-l.ue"]
NOT_LABEL_VALUES = ["v" * 64, "-v", "v.", "_v", "has space", "ünï", "a/b"]


def label_keys(key: str, value: str = "v") -> list[Candidate]:
    return [Candidate(key, {name: value}) for name in LABEL_KEYS + NOT_LABEL_KEYS]


def label_values(key: str, name: str = "team") -> list[Candidate]:
    return [Candidate(key, {name: value}) for value in LABEL_VALUES + NOT_LABEL_VALUES]


def quantities(key: str, accepted: list[str], refused: list[str], stricter: Optional[dict[str, str]] = None) -> list[Candidate]:
    reasons = {**QUANTITY_STRICTER, **(stricter or {})}
    return [Candidate(key, value) for value in accepted] + [Candidate(key, value, reasons.get(value)) for value in refused]


NOT_QUANTITIES = ["", "big", " 1", "1Gb", "1K", "1e9999999", "١"]
MORE_NOT_QUANTITIES = ["1 ", "1gi", "1.5.5", "e3", "1e", "--1", "1\n", "١Gi"]  # tried on one key: the parsing is shared
DIGEST = "@sha256:" + "a" * 64
IMAGE_ACCEPTED = ["trainer", "trainer:dev", "ghcr.io/org/trainer:1.2", "GHCR.io/org/trainer", "localhost:5000/t:v",
                  "[::1]:5000/t", "t:" + "x" * 128, "t" + DIGEST, "a.b/c/d/e:f" + DIGEST, "a__b/c---d"]  # fmt: skip
IMAGE_REFUSED_BY_THE_KUBELET = ["DDP-Trainer:dev", "ghcr.io/Org/trainer", "t:dev:2", "t@sha256:abc", "t:" + "x" * 129, "t:-x",
                                "t/" + "a" * 256, "a" * 64, "t_/x", "ünï", "t::1", "t:dev@sha256:xyz"]  # fmt: skip
IMAGE_REFUSED = [" trainer", "trainer ", ""]


CANDIDATES: list[Candidate] = [
    *each("nodes", ["1", "1024", 3]),
    *each("nodes", ["0", "1025", "-1", "2.5", "٢", "two"]),
    *each("gpusPerNode", ["0", "16"]),
    *each("gpusPerNode", ["17", "-1"]),
    *each("procsPerNode", ["0", "256"]),
    *each("procsPerNode", ["257"]),
    *each("image.name", IMAGE_ACCEPTED),
    *each("image.name", IMAGE_REFUSED_BY_THE_KUBELET, KUBELET_IMAGE),
    *each("image.name", IMAGE_REFUSED[:2], IN_A_POD),
    *each("image.name", IMAGE_REFUSED[2:]),
    *each("image.pullPolicy", ["Never", "IfNotPresent"]),
    *each("image.pullPolicy", ["always", "Sometimes", ""]),
    *each("image.pullSecrets", [["s" * 253], ["a.b-c"], []]),
    *each("image.pullSecrets", [["Registry_Creds"], ["s" * 254], ["a..b"], ["ünï"]], SECRET_NAME),
    *each("image.pullSecrets", [[""]]),
    Candidate("image.pullSecrets", ["a", "a"], stand_in=["zz-secret-a", "zz-secret-b"]),
    *each("namespace.name", ["n" * 63, "0", "a-b"]),
    *each("namespace.name", ["n" * 64, "Team-A", "-a", "a-", "a.b", "a_b", "", "ünï"]),
    *each("storage.outputs.claimName", ["c" * 253, "a.b", "0"]),
    *each("storage.outputs.claimName", ["c" * 254, "Claim", "a..b", "-a", "a.", ".a", "", "a_b"]),
    *quantities("storage.outputs.size", ["1", "1.5Gi", "0.5Ki", "1e3", "1E", "9E", "+1Gi", "1k"],
                ["0", "0Gi", "1.5", "500m", "-1Gi", "10E", "8Ei", *NOT_QUANTITIES],
                ),
    *each("storage.outputs.storageClass", ["s" * 253, "fast.ssd"]),
    *each("storage.outputs.storageClass", ["s" * 254, "Fast", "fast ssd", "-fast"]),
    *each("storage.outputs.storageClass", [""], "an empty class asks for a volume of no class, never the default one: leave the key unset"),
    *each("storage.outputs.accessMode", ["ReadWriteMany", "ReadWriteOnce"]),
    *each("storage.outputs.accessMode", ["RWX", "readwritemany", ""]),
    *each("hfToken", ["hf_AbC123", "ünïcödé ✓", "x" * 4096]),
    *quantities("resources.requests.cpu", ["0", "500m", "0.5", ".5", "1.", "1e3", "+1", "1Ki", "1k", "9E", "1e-3"],
                ["-1", "1n", "100u", "10E", *NOT_QUANTITIES, *MORE_NOT_QUANTITIES],
                {"1n": BELOW_A_MILLICORE, "100u": BELOW_A_MILLICORE}),
    *quantities("resources.limits.cpu", ["0", "250m", "64", "1e-3"], ["-500m", "1n", "10E", *NOT_QUANTITIES],
                {"1n": BELOW_A_MILLICORE}),
    *quantities("resources.requests.memory", ["0", "1", "1.5Gi", "1e3", "4Gi"], ["500m", "1.5", "-1Mi", *NOT_QUANTITIES],
                {"1e9999999": None}),  # above the memory limit too
    *quantities("resources.limits.memory", ["2", "3.5Gi", "1E", "9E"], ["500m", "1.5", "-1Mi", "8Ei", *NOT_QUANTITIES],
                ),
    *[Candidate("resources.extended", {name: "1"}) for name in
      ["example.com/fpga", "example.com/FPGA", "k8s.io/fpga", "e" * 244 + "/" + "f" * 63, "a.b/c_d.e-f"]],
    *[Candidate("resources.extended", {name: "1"}) for name in
      ["fpga", "Example.com/fpga", "example.com/", "example.com/-x", "e" * 245 + "/x", "requests.example.com/x",
       "example.com/" + "f" * 64, "example.com/a b", "ünï.com/x", "/x"]],
    *[Candidate("resources.extended", {name: "1"}, KUBERNETES_OWN) for name in ["kubernetes.io/x", "x.kubernetes.io/x"]],
    Candidate("resources.extended", {"nvidia.com/gpu": "1"}, "set gpusPerNode"),
    *[Candidate("resources.extended", {"example.com/fpga": count}) for count in ["0", "1k", "1Ki", "9E", 2]],
    *[Candidate("resources.extended", {"example.com/fpga": count}, {"10E": INT64}.get(count)) for count in
      ["500m", "1.5", "-1", "10E", "", "x", "1e-3"]],
    *quantities("shmSize", ["1", "0", "1.5Mi", "3.5Gi", "1e6"], ["1.5", "500m", "3.9Gi", "-1Mi", "4Gi", "5Gi", *NOT_QUANTITIES],
                {"1.5": FRACTION_OF_A_BYTE, "500m": FRACTION_OF_A_BYTE, "3.9Gi": FRACTION_OF_A_BYTE,
                 "4Gi": "/dev/shm counts against the memory limit: a pod filling it is OOM-killed",
                 "5Gi": "/dev/shm counts against the memory limit: a pod filling it is OOM-killed"}),
    *each("network.socketIfname", ["eth0", "^lo,docker0", "=eth0", "enp1s0f0.100"]),
    *each("network.socketIfname", ["eth0 eth1", "", "eth0;rm"]),
    *[Candidate("network.rdmaResources", {name: 1}) for name in ["rdma/hca_shared_devices_a", "nvidia.com/hostdev"]],
    *[Candidate("network.rdmaResources", {name: 1}) for name in ["rdma", "RDMA/x", "rdma/"]],
    Candidate("network.rdmaResources", {"kubernetes.io/rdma": 1}, KUBERNETES_OWN),
    *[Candidate("network.rdmaResources", {"rdma/hca": count}, PROGRAM_BOUND) for count in [0, 65]],
    *[Candidate("network.rdmaResources", {"rdma/hca": count}) for count in [-1, "x", 1.5]],
    *each("network.secondaryNetworks", [["ib-rail-0"], ["infra/ib-rail-0@net1"], ["a" * 253]]),
    *each("network.secondaryNetworks", [["IB Rail"], ["a/b/c"], ["x@"]]),
    *each("network.ibHca", ["mlx5", "=mlx5_0:1,mlx5_1:1", "^mlx5_2"]),
    *each("network.ibHca", ["mlx5 0", "", "mlx5:x"]),
    *each("network.ibGidIndex", ["0", "255"]),
    *each("network.ibGidIndex", ["256", "-1"]),
    *each("network.ncclDebug", ["INFO", "TRACE"]),
    *each("network.ncclDebug", ["info", "LOUD"]),
    *each("rendezvous.port", ["1024", "65535", 29400]),
    *each("rendezvous.port", ["0", "65536", "-1", "http", "29500.5"]),
    *each("rendezvous.port", ["80", "1023"], "a port below 1024 needs root, and the trainer runs as a user"),
    *each("rendezvous.backend", ["static", "c10d"]),
    *each("rendezvous.backend", ["zmq", "C10D"]),
    *each("rendezvous.store", ["own-pod", "pod-0"]),
    *each("rendezvous.store", ["pod0", "own_pod", ""]),
    *each("rendezvous.endpoint", ["etcd:2379", "10.0.0.1:2379", "etcd.infra.svc:65535"]),
    *each("rendezvous.endpoint", ["etcd", "etcd:port", ":2379", "http://etcd:2379"]),
    *each("rendezvous.joinTimeoutSeconds", ["30", "86400"]),
    *each("rendezvous.joinTimeoutSeconds", ["29", "86401"]),
    *each("rendezvous.readTimeoutSeconds", ["10", "3600"]),
    *each("rendezvous.readTimeoutSeconds", ["9"]),
    *each("rendezvous.lastCallTimeoutSeconds", ["1"]),
    *each("rendezvous.lastCallTimeoutSeconds", ["0"]),
    *each("rendezvous.closeTimeoutSeconds", ["3600"]),
    *each("rendezvous.closeTimeoutSeconds", ["3601"]),
    *each("rendezvous.keepAliveIntervalSeconds", ["1", "60"]),
    *each("rendezvous.keepAliveIntervalSeconds", ["0", "61"]),
    *each("rendezvous.keepAliveMaxAttempts", ["2", "100"]),
    *each("rendezvous.keepAliveMaxAttempts", ["1", "101"]),
    *each("rendezvous.masterWaitTimeoutSeconds", ["10"]),
    *each("rendezvous.masterWaitTimeoutSeconds", ["86401"]),
    *each("rendezvous.maxRestarts", ["0", "100"]),
    *each("rendezvous.maxRestarts", ["-1", "101"]),
    *each("run.name", ["r" * 63, "run-1.b_c", "R"]),
    *each("run.name", ["r" * 64, "../escape", "-run", "a/b", "", "ünï"]),
    *each("run.args", [["-m", "trainer.train", ""], ["ünïcödé", "--lr", "3e-3"], ["$(NNODES)"]]),
    *each("run.args", [[]]),
    *each("workload.name", ["w" * 52, "t", "a-1"]),
    # 52 keeps a StatefulSet pod's controller-revision-hash label and the store's <name>-rdzv-store in 63
    *each("workload.name", ["w" * 53]),
    *each("workload.name", ["Trainer", "trainer-", "-trainer", "tr.ainer", "tr_ainer", "", "ünï"]),
    # the name of the world's Service: a DNS-1035 label before Kubernetes 1.36 (RelaxedServiceNameValidation, on from 1.36)
    *each("workload.name", ["7b-run"], "clusters before Kubernetes 1.36 refuse a Service name that starts with a digit"),
    *each("workload.terminationGracePeriodSeconds", ["0", "3600"]),
    *each("workload.terminationGracePeriodSeconds", ["-1", "x"]),
    *each("workload.terminationGracePeriodSeconds", ["3601"], PROGRAM_BOUND),
    *each("workload.maxUnavailable", ["0", "100000"]),
    *each("workload.maxUnavailable", ["-1", "100001"]),
    *each("workload.sparePods", ["0", "1024"]),
    *each("workload.sparePods", ["-1", "x", "1025"]),
    *each("workload.backoffLimit", ["0", "100"]),
    *each("workload.backoffLimit", ["-1"]),
    *each("workload.backoffLimit", ["101"], PROGRAM_BOUND),
    *each("workload.ttlSecondsAfterFinished", ["0", "2592000"]),
    *each("workload.ttlSecondsAfterFinished", ["-1"]),
    *each("workload.ttlSecondsAfterFinished", ["2592001"], PROGRAM_BOUND),
    *each("workload.liveness.seconds", ["0", "1", "9", "37", "3600"]),
    *each("workload.liveness.seconds", ["-1", "x", "3601"]),
    *each("workload.liveness.port", ["1024", "65535"]),
    *each("workload.liveness.port", ["0", "65536", "x"]),
    *each("workload.liveness.port", ["1023"], "the image's user cannot listen below 1024"),
    *each("workload.hangTimeout.floorSeconds", ["5", "120"]),
    *each("workload.hangTimeout.floorSeconds", ["4"]),
    *each("workload.hangTimeout.ceilingSeconds", ["0", "86400"]),
    *each("workload.hangTimeout.ceilingSeconds", ["86401"]),
    *label_keys("scheduling.nodeSelector"),
    *label_values("scheduling.nodeSelector"),
    *[Candidate("scheduling.nodeSelector", {name: "v"}) for name in
      ["kubernetes.io/arch", "topology.kubernetes.io/zone", "node-role.kubernetes.io/control-plane"]],
    *[Candidate("scheduling.nodeSelector", {name: "v"}) for name in
      ["beta.kubernetes.io/arch", "beta.kubernetes.io/os", "failure-domain.beta.kubernetes.io/zone",
       "failure-domain.beta.kubernetes.io/region", "beta.kubernetes.io/instance-type", "node-role.kubernetes.io/master",
       "app.kubernetes.io/created-by", "scheduler.alpha.kubernetes.io/preferAvoidPods"]],
    *[Candidate("scheduling.tolerations", [{"key": key, "operator": "Equal", "value": "v", "effect": "NoSchedule"}])
      for key in ["nvidia.com/gpu", "k" * 63, "p" * 253 + "/" + "k" * 63, "bad key", "", "Example.com/gpu", "k" * 64]],
    *[Candidate("scheduling.tolerations", [{"key": "k", "operator": operator, "value": "v", "effect": "NoSchedule"}])
      for operator in ["Equal", "Equals", "equal", "Lt"]],
    Candidate("scheduling.tolerations", [{"key": "k", "operator": "", "value": "v", "effect": "NoSchedule"}], UNSET_IS_THE_DEFAULT),
    *[Candidate("scheduling.tolerations", [{"key": "k", "operator": "Equal", "value": value, "effect": "NoSchedule"}])
      for value in ["", "v" * 63, "v" * 64, "has space", "-v"]],
    *[Candidate("scheduling.tolerations", [{"key": "k", "operator": "Equal", "value": "v", "effect": effect}])
      for effect in ["NoExecute", "PreferNoSchedule", "noschedule", "NoSchedulee"]],
    Candidate("scheduling.tolerations", [{"key": "k", "operator": "Equal", "value": "v", "effect": ""}], UNSET_IS_THE_DEFAULT),
    *[Candidate("scheduling.tolerations", [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}],
                stand_in=[{"key": "zz-taint-key", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 4711}])
      for seconds in [0, 2**53 - 1, 2**63, "x", 1.5]],
    Candidate("scheduling.tolerations", [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": -1}],
              "a negative time: the taint evicts the pod at once", [{"key": "zz-taint-key", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 4711}]),
    *each("scheduling.tolerations", [[{"operator": "Exists"}], [{"key": "k", "operator": "Exists"}]]),
    *each("scheduling.affinity", [{"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}}]),
    *each("scheduling.priorityClassName", ["p" * 253, "system-node-critical", "high.priority"]),
    *each("scheduling.priorityClassName", ["p" * 254, "High", "high.", "-high", "high priority"]),
    *each("scheduling.priorityClassName", [""], UNSET_IS_THE_DEFAULT),
    *each("scheduling.topologySpread.topologyKey", ["topology.kubernetes.io/zone", "kubernetes.io/hostname", "rack"]),
    *each("scheduling.topologySpread.topologyKey", ["", "failure-domain.beta.kubernetes.io/zone", "beta.kubernetes.io/instance-type"]),
    *each("scheduling.topologySpread.topologyKey", ["Zone Key", "-zone", "a/b/c"], NODE_LABEL),
    *each("scheduling.topologySpread.maxSkew", ["1", "1024"]),
    *each("scheduling.topologySpread.maxSkew", ["0", "-1"]),
    *each("scheduling.topologySpread.maxSkew", ["1025"], PROGRAM_BOUND),
    *each("scheduling.topologySpread.whenUnsatisfiable", ["ScheduleAnyway"]),
    *each("scheduling.topologySpread.whenUnsatisfiable", ["Never", "scheduleanyway", ""]),
    *each("scheduling.gang.queue", ["q" * 63, "team-a"]),
    *each("scheduling.gang.queue", ["q" * 64, "Team A", "team-", "ünï"]),
    *each("scheduling.gang.queue", ["team.a"], "a LocalQueue's name is a DNS-1123 label here, as the program's own names are"),
    *each("scheduling.gang.workloadPriorityClass", ["w" * 61 + ".p", "high"]),
    *each("scheduling.gang.workloadPriorityClass", ["p" * 64, "high."]),
    *each("scheduling.gang.workloadPriorityClass", ["High"], "it names a Kueue WorkloadPriorityClass, whose name is a DNS-1123 subdomain"),
    *each("scheduling.gang.workloadPriorityClass", [""], UNSET_IS_THE_DEFAULT),
    *each("scheduling.topology.level", ["cloud.example.com/topology-block", "kubernetes.io/hostname", "rack"]),
    *each("scheduling.topology.level", ["Example.com/rack", "a/b/c", "rack!"], "it names a node label of Kueue's Topology: a label key"),
    *each("scheduling.topology.level", ["beta.kubernetes.io/arch"], "a deprecated node label, which nodes may stop carrying"),
    *each("scheduling.topology.slice.level", ["cloud.example.com/topology-rack", "kubernetes.io/hostname"]),
    *each("scheduling.topology.slice.level", ["Example.com/rack", "a/b/c"], "it names a node label of Kueue's Topology: a label key"),
    *each("scheduling.topology.slice.size", ["1"]),
    *each("scheduling.topology.slice.size", ["0", "x"]),
    *each("scheduling.topology.mode", ["required", "preferred"]),
    *each("scheduling.topology.mode", ["Required", "unconstrained"]),
    *label_keys("labels"),
    *label_values("labels"),
    # The program's own labels, which its selectors pick its pods by. Not tried on the API server: put
    # in place of the stand-in, the key would stand twice in one object, and which value wins depends
    # on the order the engine records the labels in.
    *[Candidate("labels", {name: "x"}, stand_in=NOT_TRIED) for name in ["app.kubernetes.io/name", "app.kubernetes.io/instance"]],
    *[Candidate("labels", {name: "x"}) for name in ["controller-uid", "job-name", "batch.kubernetes.io/controller-uid",
                                                     "batch.kubernetes.io/job-name"]],
    *[Candidate("labels", {name: "0"}, JOB_LABEL) for name in ["batch.kubernetes.io/job-completion-index"]],
    *[Candidate("annotations", {name: "any text"}) for name in LABEL_KEYS + NOT_LABEL_KEYS if name != "Example.com/team"],
    Candidate("annotations", {"Example.com/team": "any text"}, "checked as a label key, though the API server lowercases an annotation's key first"),
    *[Candidate("annotations", {"note": value}) for value in ["", "ünïcödé ✓", "multi\nline", "x" * (MAX_ANNOTATION_BYTES - 4)]],
    Candidate("annotations", {"note": "x" * (MAX_ANNOTATION_BYTES - 3)}, "1 KiB of the 256 KiB is the program's, for its own annotations"),
    Candidate("annotations", {"note": "x" * 256 * 1024}),
    *[Candidate("annotations", {"controller.kubernetes.io/pod-deletion-cost": cost}) for cost in
      ["-2147483648", "2147483647", "0", "-0", "-007"]],
    *[Candidate("annotations", {"controller.kubernetes.io/pod-deletion-cost": cost}) for cost in
      ["2147483648", "+1", "007", "1.5", "", "-١", "١"]],
    *[Candidate("annotations", {name: "x"}) for name in
      ["kubernetes.io/config.mirror", "scheduler.alpha.kubernetes.io/critical-pod", "security.alpha.kubernetes.io/sysctls",
       "security.alpha.kubernetes.io/unsafe-sysctls", "seccomp.security.alpha.kubernetes.io/pod",
       "container.seccomp.security.alpha.kubernetes.io/trainer", "container.apparmor.security.beta.kubernetes.io/trainer",
       "scheduler.alpha.kubernetes.io/tolerations"]],
    *[Candidate("env", {name: "x"}) for name in ["MY_VAR", "_x", "a1", "X" * 300]],
    *[Candidate("env", {name: "x"}) for name in ["A=B", "", "ÜNÏ"]],
    *[Candidate("env", {name: "x"}, SHELL_NAME) for name in ["MY.VAR", "MY-VAR", "1BAD", "A B"]],
    *[Candidate("env", {name: "x"}) for name in ["NNODES", "HOME"]],
    *[Candidate("env", {"MY_VAR": value}) for value in ["", "$(NNODES)", "ünïcödé ✓", "multi\nline", "x" * 65536]],
    *[Candidate("secretEnv", {name: "s"}) for name in ["S" * 253, "MY_SECRET"]],
    *[Candidate("secretEnv", {name: "s"}) for name in ["S" * 254, "A=B", "", "ÜNÏ"]],
    *[Candidate("secretEnv", {name: "s"}, SHELL_NAME) for name in ["MY.SECRET", "MY-SECRET"]],
    *each("pod.runtimeClassName", ["r" * 253, "nvidia", "kata.fc"]),
    *each("pod.runtimeClassName", ["r" * 254, "Nvidia", "nvidia.", "-nvidia", "nvidia runtime", ""]),
    *[Candidate("pod.volumes", [{"name": name, "emptyDir": {}}]) for name in ["logs", "l" * 63]],
    *[Candidate("pod.volumes", [{"name": name, "emptyDir": {}}]) for name in ["Logs", "l" * 64, "logs.x", "-logs", ""]],
    *[Candidate("pod.volumes", [{"name": name, "emptyDir": {}}]) for name in ["dshm", "tmp"]],
    *[Candidate("pod.volumeMounts", [{"name": "tmp", "mountPath": path, "subPath": "s"}]) for path in
      ["/logs", "/var/log/trainer/", "/x\u00e9", "/out2", "/outputs/x"]],
    *[Candidate("pod.volumeMounts", [{"name": "tmp", "mountPath": path, "subPath": "s"}]) for path in
      [""]],
    *[Candidate("pod.volumeMounts", [{"name": "tmp", "mountPath": path, "subPath": "s"}], PLAIN_PATH) for path in ["/a:b", "/a b", "/a\tb"]],
    *[Candidate("pod.volumeMounts", [{"name": "tmp", "mountPath": path, "subPath": "s"}],
                "the container runtime mounts at an absolute path") for path in ["logs", "./logs"]],
    *[Candidate("pod.volumeMounts", [{"name": "tmp", "mountPath": path, "subPath": "s"}], PROGRAM_PATH) for path in
      ["/out/", "/a/../out", "//out", "/out/.", "/./data"]],
    *[Candidate("pod.volumeMounts", [{"name": "tmp", "mountPath": path, "subPath": "s"}]) for path in ["/out", "/data", "/tmp", "/dev/shm"]],
    *[Candidate("pod.volumeMounts", [{"name": "tmp", "mountPath": "/logs", "subPath": sub}]) for sub in
      ["logs/rank-0", "..logs", "a/./b", "a..", "ünï"]],
    *[Candidate("pod.volumeMounts", [{"name": "tmp", "mountPath": "/logs", "subPath": sub}]) for sub in
      ["../x", "a/../../x", "/abs", "..", "a/.."]],
    *[Candidate("pod.volumeMounts", [{"name": name, "mountPath": "/logs", "subPath": "s"}], stand_in=NOT_TRIED) for name in ["Tmp", "nope", ""]],
    *[Candidate(key, [{"name": name, "image": "busybox:1"}]) for key in ("pod.initContainers", "pod.sidecars")
      for name in ["shipper", "s" * 63]],
    *[Candidate(key, [{"name": name, "image": "busybox:1"}]) for key in ("pod.initContainers", "pod.sidecars")
      for name in ["Shipper", "s" * 64, "trainer", "ship.per", ""]],
    *[Candidate(key, [{"name": "shipper", "image": image}]) for key in ("pod.initContainers", "pod.sidecars")
      for image in ["busybox", "ghcr.io/a/b:1" + DIGEST]],
    *[Candidate(key, [{"name": "shipper", "image": image}], KUBELET_IMAGE) for key in ("pod.initContainers", "pod.sidecars")
      for image in ["Busybox", "busybox:1 2", "busybox@sha256:abc"]],
    *[Candidate(key, [{"name": "shipper", "image": image}]) for key in ("pod.initContainers", "pod.sidecars")
      for image in [""]],
    *[Candidate(key, [{"name": "shipper", "image": " busybox"}], IN_A_POD) for key in ("pod.initContainers", "pod.sidecars")],
    *each("pod.templatePatch", [{"metadata": {"labels": {"team": "nlp"}}}, {"spec": {"dnsPolicy": "ClusterFirst"}}]),
    *each("pod.templatePatch", [{"spec": {"hostname": "x"}}, {"metadata": {"labels": {"app.kubernetes.io/name": "x"}}}]),
]  # fmt: skip


# --- judging a candidate ------------------------------------------------------------------------

def config_of(candidate: Candidate, value: Any) -> dict[str, Any]:
    changes = dict(KEYS[candidate.key].context)
    changes[candidate.key] = value
    return malformed(changes)


def stand_in_of(candidate: Candidate) -> Any:
    """The value the candidate stands in for on the API server; None: it is not tried there."""
    if candidate.stand_in == NOT_TRIED:
        return None
    return candidate.stand_in if candidate.stand_in is not None else KEYS[candidate.key].stand_in


@functools.cache
def evaluated(config_json: str) -> harness.Evaluation:
    return harness.evaluate(json.loads(config_json), secret_keys=SECRET_KEYS)


def evaluation_of(candidate: Candidate, value: Any) -> harness.Evaluation:
    return evaluated(json.dumps(config_of(candidate, value), sort_keys=True))


def replacements(stand_in: Any, value: Any) -> list[tuple[Any, Any]]:
    """(what the stand-in wrote, what the candidate would have) for each leaf where they differ."""
    if isinstance(stand_in, dict) and isinstance(value, dict):
        if stand_in.keys() == value.keys():
            return [pair for key in stand_in for pair in replacements(stand_in[key], value[key])]
        assert len(stand_in) == len(value) == 1, f"{value!r} is not of the shape of its stand-in {stand_in!r}"
        ((old_key, old), (new_key, new)) = (*stand_in.items(), *value.items())
        return [(old_key, new_key), *replacements(old, new)]
    if isinstance(stand_in, list) and isinstance(value, list):
        assert len(stand_in) == len(value), f"{value!r} is not of the shape of its stand-in {stand_in!r}"
        return [pair for old, new in zip(stand_in, value) for pair in replacements(old, new)]
    if isinstance(stand_in, int) and isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value):
        value = int(value)  # the config takes a number as the CLI stores it: text
    return [] if value == stand_in else [(stand_in, value)]


def replaced(node: Any, pairs: dict[Any, Any]) -> Any:
    """node with each stand-in's leaf replaced: within text, all at once (one stand-in may hold
    another); a number where it is the whole value."""
    if isinstance(node, dict):
        return {replaced(key, pairs): replaced(value, pairs) for key, value in node.items()}
    if isinstance(node, list):
        return [replaced(item, pairs) for item in node]
    if isinstance(node, (int, str)) and not isinstance(node, bool):
        for old, new in pairs.items():
            if isinstance(old, int) and node in (old, str(old)):
                return new if node == old else str(new)
    texts = {old: new for old, new in pairs.items() if isinstance(old, str)}
    if isinstance(node, str) and texts:
        any_text = "|".join(re.escape(old) for old in sorted(texts, key=len, reverse=True))
        whole = texts.get(node)
        if whole is not None and not isinstance(whole, str):
            return whole
        return re.sub(any_text, lambda match: str(texts[match.group()]), node)
    return node


def documents_with_stand_in_replaced(candidate: Candidate) -> list[dict[str, Any]]:
    """The objects made with the key's stand-in, the candidate put wherever the stand-in landed."""
    stand_in = stand_in_of(candidate)
    evaluation = evaluation_of(candidate, stand_in)
    assert evaluation.error is None, f"the stand-in of {candidate.key} is refused: {evaluation.error}"
    documents = evaluation.kubernetes_manifests
    pairs = dict(replacements(stand_in, candidate.value))
    for old in pairs:
        assert replaced(documents, {old: "\0"}) != documents, f"{old!r}, of {candidate.key}'s stand-in, is in no object"
    return replaced(documents, pairs)


@dataclass(frozen=True)
class Trial:
    candidate: Candidate
    problems: list[Any]  # the config's, one per refused key; [] where it accepts the value
    documents: Optional[list[dict[str, Any]]]  # what goes to the API server; None: not tried there

    @property
    def accepted(self) -> bool:
        return not self.problems


def trial_of(candidate: Candidate) -> Trial:
    evaluation = evaluation_of(candidate, candidate.value)
    if evaluation.error is None:
        return Trial(candidate, [], evaluation.kubernetes_manifests)
    tried = stand_in_of(candidate) is not None
    return Trial(candidate, evaluation.error.problems, documents_with_stand_in_replaced(candidate) if tried else None)


@functools.cache
def config_trials() -> tuple[Trial, ...]:
    return tuple(trial_of(candidate) for candidate in CANDIDATES)


# --- the API server ---------------------------------------------------------------------------

class DryRun:
    """Creates objects on the API server with dryRun=All, as the provider creates them (a create,
    strict field validation), each in a request of its own so that an error or a warning names
    its object; many at once. Namespaces are created for real: a namespaced object needs one."""

    def __init__(self, api: LocalApiServer):
        self.api = api
        self.tls = ssl.create_default_context(cafile=api.ca_file)
        self.connections = threading.local()  # one kept open per thread: a TLS handshake costs more than a dry run
        self.paths: dict[tuple[str, str], tuple[str, str, bool]] = {}
        self.namespaces: dict[str, Optional[str]] = {}

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any], list[str]]:
        if not hasattr(self.connections, "https"):
            self.connections.https = http.client.HTTPSConnection(urllib.parse.urlsplit(self.api.server).netloc, context=self.tls, timeout=60)
        headers = {"Authorization": f"Bearer {self.api.token}", "Content-Type": "application/json"}
        self.connections.https.request(method, path, body=None if body is None else json.dumps(body).encode(), headers=headers)
        response = self.connections.https.getresponse()
        return response.status, json.loads(response.read() or b"{}"), response.headers.get_all("Warning") or []

    def collection(self, document: dict[str, Any]) -> str:
        """The URL path the API server creates such an object at (from its discovery documents)."""
        api_version, kind = document["apiVersion"], document["kind"]
        if (api_version, kind) not in self.paths:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            status, listing, _ = self.request("GET", base)
            assert status == 200, f"the API server serves no {api_version}"
            for resource in listing["resources"]:
                if "/" not in resource["name"]:  # not a subresource (pods/status)
                    self.paths[api_version, resource["kind"]] = (base, resource["name"], resource["namespaced"])
        base, plural, namespaced = self.paths[api_version, kind]
        if namespaced:
            return f"{base}/namespaces/{urllib.parse.quote(document['metadata']['namespace'], safe='')}/{plural}"
        return f"{base}/{plural}"

    def create(self, document: dict[str, Any], dry_run: bool = True) -> Optional[str]:
        """None where the API server admits the object without a warning, else what it said."""
        query = "?fieldValidation=Strict" + ("&dryRun=All" if dry_run else "")
        status, body, warnings = self.request("POST", self.collection(document) + query, document)
        if status >= 300:
            return f"{document['kind']}: {body.get('message', status)}"
        return f"{document['kind']}: warning: {warnings[0]}" if warnings else None

    def namespace(self, document: dict[str, Any]) -> Optional[str]:
        name = document["metadata"]["name"]
        if name not in self.namespaces:
            self.namespaces[name] = self.create(document, dry_run=False)
        return self.namespaces[name]

    def judge(self, trials: list[Trial]) -> list[Optional[str]]:
        """What the API server said to each trial's objects: its namespace's answer, else the first
        of the others' (None: it admits them all without a warning). Each distinct object is sent once."""
        answers: dict[str, Optional[str]] = {}
        for trial in trials:  # one at a time: the same namespace comes in many trials
            for document in trial.documents:
                if document["kind"] == "Namespace":
                    answers[json.dumps(document, sort_keys=True)] = self.namespace(document)
        others = {json.dumps(doc, sort_keys=True): doc for trial in trials for doc in trial.documents if doc["kind"] != "Namespace"}
        with ThreadPoolExecutor(8) as pool:
            answers.update(zip(others, pool.map(self.create, others.values())))
        said = [[answers[json.dumps(doc, sort_keys=True)] for doc in trial.documents] for trial in trials]
        return [next((answer for answer in answers_of_trial if answer), None) for answers_of_trial in said]


@pytest.fixture(scope="module")
def judged() -> list[tuple[Trial, Optional[str]]]:
    """Every trial tried on the API server, with what the server said (None: admitted, no warning)."""
    tried = [trial for trial in config_trials() if trial.documents is not None]
    with LocalApiServer() as api:
        return list(zip(tried, DryRun(api).judge(tried)))


def listing(judged: list[tuple[Trial, Optional[str]]]) -> str:
    return "\n".join(f"  {trial.candidate.id}: {said or '(admitted)'}" for trial, said in judged)


# --- the tests ----------------------------------------------------------------------------------

@pytest.mark.timeout(240)
def test_the_api_server_admits_without_a_warning_every_candidate_the_config_accepts(judged):
    accepted = [(trial, said) for trial, said in judged if trial.accepted]
    refused_by_the_server = [(trial, said) for trial, said in accepted if said]
    assert not refused_by_the_server, f"accepted by the config, not by the API server:\n{listing(refused_by_the_server)}"
    assert len(accepted) == sum(1 for trial in config_trials() if trial.accepted) > 150


@pytest.mark.timeout(240)
def test_a_candidate_the_config_refuses_and_the_api_server_admits_says_why_the_config_is_stricter(judged):
    refused = [(trial, said) for trial, said in judged if not trial.accepted]
    unexplained = [(trial, said) for trial, said in refused if not said and not trial.candidate.stricter]
    stale = [(trial, said) for trial, said in refused if said and trial.candidate.stricter]
    assert not unexplained + stale, (
        f"refused by the config only, and no reason given:\n{listing(unexplained)}\n"
        f"a reason given, but the API server refuses these too:\n{listing(stale)}"
    )
    assert sum(1 for _, said in refused if said) > 150


def test_a_reason_to_be_stricter_is_given_only_where_the_config_refuses_a_value_it_tries_on_the_api_server():
    misplaced = [t.candidate.id for t in config_trials() if t.candidate.stricter and (t.accepted or t.documents is None)]
    assert not misplaced


def names_the_value(problem: Any, value: Any) -> bool:
    """Whether a problem's `given` is (the start of) the candidate's value or a part of it."""
    given = problem.given.removesuffix("...").strip("'\"")
    texts = (json.dumps(value, ensure_ascii=False), repr(value), str(value))
    return any(given[:60] in text for text in texts)


def test_every_candidate_the_config_refuses_is_answered_with_its_key_its_value_and_what_is_allowed():
    unanswered = []
    for trial in config_trials():
        key, value = f"ddp-infra:{trial.candidate.key}", trial.candidate.value
        if not trial.accepted and not any(
            str(p.key).startswith(key) and names_the_value(p, value) and p.allowed for p in trial.problems
        ):
            unanswered.append(f"  {trial.candidate.id}: {[str(p) for p in trial.problems]}")
    assert not unanswered, "\n".join(unanswered)


def config_reference():
    spec = importlib.util.spec_from_file_location("config_reference", harness.REPO / "scripts" / "config_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Keys no value of which reaches a Kubernetes object as it is: what Pulumi reads (the provider's
# connection, how long it waits, what it keeps), or a choice the program turns into objects of its
# own (a kind, a scheduler, a boolean). Every claim takes the same keys as storage.outputs.
NOT_PUT_IN_OBJECTS = (
    "kubernetes.renderDir", "kubernetes.context", "workload.waitFor", "workload.waitSeconds", "workload.waitFailure", "workload.kind",
    "scheduling.fitCheck", "scheduling.gang.scheduler", "scheduling.topologySpread.enabled", "namespace.create",
    "network.infiniband", "network.asyncErrorHandling", "pod.readOnlyRootFilesystem",
    "storage.datasets.*", "storage.models.*", "storage.outputs.create", "storage.outputs.retainOnDelete",
    "storage.outputs.protect", "pod.volumeMounts[].readOnly",
)  # fmt: skip


def covered_keys(candidate: Candidate, reference: dict[str, str]) -> set[str]:
    """The reference's keys a candidate tries: its key, or the fields of a list's items it varies."""
    key = candidate.key
    if not reference.get(key, "").startswith("list of object"):
        return {key}
    stand_in = candidate.stand_in if isinstance(candidate.stand_in, list) else KEYS[key].stand_in
    item, stand_in_item = candidate.value[0] if candidate.value else {}, stand_in[0]
    return {f"{key}[].{field}" for field in {*item, *stand_in_item} if item.get(field) != stand_in_item.get(field)}


def test_every_config_key_that_reaches_a_kubernetes_object_has_candidates():
    reference = {key: type_ for key, type_, _, _ in config_reference().rows()}
    leaves = {key for key in reference if not any(other.startswith(f"{key}.") or other.startswith(f"{key}[].") for other in reference)}
    excluded = {key for key in leaves for pattern in NOT_PUT_IN_OBJECTS if key == pattern or (pattern.endswith("*") and key.startswith(pattern[:-1]))}
    covered = {key for candidate in CANDIDATES for key in covered_keys(candidate, reference)}
    assert leaves - excluded - covered == set()
    assert covered <= leaves, covered - leaves
