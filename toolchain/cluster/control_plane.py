"""The cluster's control plane: etcd and kube-apiserver (their command lines shared with the test API
server, toolchain/apiserver/control_plane.py), kube-controller-manager and kube-scheduler, and what a cluster
installer adds once the API server answers (CoreDNS's and kube-router's read access, local
storage for claims)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from toolchain.apiserver import control_plane

from .credentials import COREDNS_USER, KUBE_ROUTER_USER
from .network import API_PORT, NODE_IP, SERVICE_CIDR
from .running import RunningCluster


LOCAL_STORAGE_CLASS = "local"
LOCAL_PROVISIONER = "kubernetes.io/no-provisioner"  # static volumes: no provisioner makes them
# Released volumes are not reused (Retain, as a cloud disk would be kept): one per claim a test suite makes.
PERSISTENT_VOLUMES = 32


def start_etcd_and_apiserver(cluster: RunningCluster, binaries: dict[str, str]) -> None:
    pki = cluster.run_dir / "pki"
    spawn = cluster.spawn
    spawn("etcd", control_plane.etcd_argv(binaries["etcd"], cluster.run_dir / "etcd", 2379, 2380))
    spawn("kube-apiserver", control_plane.apiserver_argv(
        binaries["kube-apiserver"], etcd_url="http://127.0.0.1:2379", bind="0.0.0.0", advertise=NODE_IP, port=API_PORT,
        cert=pki / "apiserver.crt", key=pki / "apiserver.key", tokens=pki / "tokens.csv",
        service_account_key=pki / "service-account.key", issuer=f"https://kubernetes.default.svc.{cluster.domain}",
        service_cidr=SERVICE_CIDR,
        extra=[
            "--client-ca-file", str(pki / "ca.crt"),
            "--authorization-mode", "Node,RBAC",
            "--enable-admission-plugins", "NodeRestriction",
            # logs, exec and port-forward reach the kubelet by its address, not a DNS lookup
            "--kubelet-preferred-address-types", "InternalIP,Hostname",
            *(control_plane.WORKLOAD_API_FLAGS if cluster.workload_api else []),
        ],
    ))  # fmt: skip


def read_access(user: str, rules: list[tuple[str, list[str]]]) -> list[dict[str, Any]]:
    """A ClusterRole named after `user` that lists, gets and watches (api group, resources) pairs, bound to it."""
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": user},
         "rules": [{"apiGroups": [group], "resources": resources, "verbs": ["get", "list", "watch"]} for group, resources in rules]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": user},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]},
    ]  # fmt: skip


def bootstrap_objects(cluster: RunningCluster) -> None:
    """What a cluster installer adds: CoreDNS's and kube-router's read access, and local storage for claims."""
    volumes = cluster.run_dir / "volumes"
    objects: list[dict[str, Any]] = [
        *read_access(COREDNS_USER, [("", ["endpoints", "services", "pods", "namespaces"]), ("discovery.k8s.io", ["endpointslices"])]),
        # what its network policy controller watches (its informers start for all of these)
        *read_access(KUBE_ROUTER_USER, [("", ["namespaces", "pods", "services", "nodes", "endpoints"]),
                                        ("networking.k8s.io", ["networkpolicies"]), ("discovery.k8s.io", ["endpointslices"])]),
        # The default class: claims without a class (the dev stack's) bind to a local volume
        # once their pod is scheduled, as on a cloud cluster's default class.
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
         "metadata": {"name": LOCAL_STORAGE_CLASS, "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
         "provisioner": LOCAL_PROVISIONER, "volumeBindingMode": "WaitForFirstConsumer", "reclaimPolicy": "Retain"},
    ]  # fmt: skip
    for i in range(PERSISTENT_VOLUMES):
        path = volumes / f"pv-{i}"
        path.mkdir(parents=True)
        objects.append({
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"local-pv-{i}"},
            "spec": {
                "capacity": {"storage": "100Gi"}, "accessModes": ["ReadWriteOnce", "ReadWriteMany", "ReadOnlyMany"],
                "persistentVolumeReclaimPolicy": "Retain", "storageClassName": LOCAL_STORAGE_CLASS,
                "local": {"path": str(path)},
                # Every node sees the machine's directories: a volume reachable from each node
                # stands in for a shared filesystem (NFS, a cloud file store), where every pod of
                # the world mounts the same claim.
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [node.name for node in cluster.nodes]}]}]}},
            },
        })  # fmt: skip
    cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))


def _identity_flags(pki: Path, component: str) -> list[str]:
    """The controller-manager's and the scheduler's identity, serving address and one instance."""
    kubeconfig = str(pki / f"{component}.kubeconfig")
    return ["--kubeconfig", kubeconfig, "--authentication-kubeconfig", kubeconfig,
            "--authorization-kubeconfig", kubeconfig, "--bind-address", "127.0.0.1", "--leader-elect=false"]  # fmt: skip


def start_controllers(cluster: RunningCluster, binaries: dict[str, str]) -> None:
    pki = cluster.run_dir / "pki"
    gates = control_plane.WORKLOAD_API_GATES if cluster.workload_api else []
    cluster.spawn("kube-controller-manager", [
        binaries["kube-controller-manager"],
        *_identity_flags(pki, "kube-controller-manager"),
        "--use-service-account-credentials",
        "--service-account-private-key-file", str(pki / "service-account.key"),
        "--root-ca-file", str(pki / "ca.crt"),
        "--cluster-signing-cert-file", str(pki / "ca.crt"), "--cluster-signing-key-file", str(pki / "ca.key"),
        "--cluster-name", f"ddp-infra-{cluster.name}",
        "--service-cluster-ip-range", SERVICE_CIDR,
        *gates,
    ])  # fmt: skip
    cluster.spawn("kube-scheduler", [binaries["kube-scheduler"], *_identity_flags(pki, "kube-scheduler"), *gates])
