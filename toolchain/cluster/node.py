"""The cluster's nodes, each with its kubelet (on a containerd of its own, in cgroups of its own),
kube-proxy and kube-router's network policy controller, which enforces NetworkPolicy in the
node's own iptables; and CoreDNS, one for the cluster on the control plane's address, which every
node's pods reach across the nodes' network and which answers for the cluster's domain only."""

from __future__ import annotations

import json

from .cluster_node import ClusterNode
from .network import CLUSTER_CIDR, NODE_IP, SERVICE_CIDR
from .running import RunningCluster

KUBE_ROUTER_HEALTH_PORT = 20244


def start_node(cluster: RunningCluster, node: ClusterNode, binaries: dict[str, str]) -> None:
    """The node's kubelet and kube-proxy (its containerd runs already)."""
    run_dir, pki = node.run_dir, cluster.run_dir / "pki"
    resolv = run_dir / "resolv.conf"
    # Pods resolve through the cluster DNS only: no name outside the cluster is forwarded anywhere.
    resolv.write_text(f"nameserver {NODE_IP}\n")
    kubelet_config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # cgroup v1 without systemd as PID 1
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "cgroupRoot": node.cgroup_root,
        "containerRuntimeEndpoint": f"unix://{node.containerd.socket}",
        "clusterDNS": [NODE_IP],
        "clusterDomain": cluster.domain,
        "resolvConf": str(resolv),
        "address": node.ip,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        # Only the API server reaches the kubelet, from inside the namespace.
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "failSwapOn": False,
        # The imported images are the only copies (no registry to pull them again from): no image
        # garbage collection (100 turns it off), and no disk-pressure eviction ("0%" turns a
        # threshold off), which would evict the training pods and taint the node. The cluster
        # checks its disk before it starts instead (containerd.ensure_room).
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "0%", "imagefs.available": "0%"},
        "volumePluginDir": "/var/lib/kubelet/volume-plugins",
        "serializeImagePulls": False,
    }
    if node.reserved():
        # The share advertised: allocatable = capacity - systemReserved (enforced on no cgroup).
        kubelet_config["systemReserved"] = node.reserved()
    (run_dir / "kubelet.json").write_text(json.dumps(kubelet_config, indent=2))
    cluster.spawn_on(node, "kubelet", [
        binaries["kubelet"],
        "--config", str(run_dir / "kubelet.json"),
        "--kubeconfig", str(pki / f"{node.key('kubelet')}.kubeconfig"),
        "--hostname-override", node.name,
        "--node-ip", node.ip,
        "--root-dir", "/var/lib/kubelet",
        "--cert-dir", "/var/lib/kubelet/pki",
    ])  # fmt: skip
    cluster.spawn_on(node, "kube-proxy", [
        binaries["kube-proxy"],
        "--kubeconfig", str(pki / "kube-proxy.kubeconfig"),
        "--hostname-override", node.name,
        "--proxy-mode", "iptables",
        "--cluster-cidr", CLUSTER_CIDR,
        # change no machine-wide conntrack setting
        "--conntrack-max-per-core", "0",
        "--conntrack-tcp-timeout-established", "0s",
        "--conntrack-tcp-timeout-close-wait", "0s",
        "--metrics-bind-address", "127.0.0.1:10249",
        "--healthz-bind-address", "127.0.0.1:10256",
    ])  # fmt: skip


def start_dns(cluster: RunningCluster, binaries: dict[str, str]) -> None:
    """CoreDNS on the control plane's address, the kubelets' clusterDNS on every node."""
    pki = cluster.run_dir / "pki"
    corefile = cluster.run_dir / "Corefile"
    corefile.write_text(f""".:53 {{
    bind {NODE_IP}
    errors
    ready {NODE_IP}:8181
    kubernetes {cluster.domain} in-addr.arpa ip6.arpa {{
        kubeconfig {pki / 'coredns.kubeconfig'} {cluster.context}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
}}
""")
    cluster.spawn("coredns", [binaries["coredns"], "-conf", str(corefile)])


def start_network_policy(cluster: RunningCluster, node: ClusterNode, binaries: dict[str, str]) -> None:
    """NetworkPolicy enforced in the node's iptables and ipsets (pods on the CNI bridge are filtered
    through bridge netfilter, on in the namespace) by kube-router's network policy controller, once
    the node is registered (it finds its own Node object at start). Its router and service proxy
    stay off: kube-proxy serves Services, and the advisories of the served release are in those two."""
    pki = cluster.run_dir / "pki"
    cluster.spawn_on(node, "kube-router", [
        binaries["kube-router"],
        "--run-firewall=true", "--run-router=false", "--run-service-proxy=false", "--run-loadbalancer=false",
        "--kubeconfig", str(pki / "kube-router.kubeconfig"),
        "--hostname-override", node.name,
        "--service-cluster-ip-range", SERVICE_CIDR,
        "--health-port", str(KUBE_ROUTER_HEALTH_PORT),
    ])  # fmt: skip


def node_ready(cluster: RunningCluster, node: ClusterNode) -> bool:
    out = cluster.kubectl("get", "node", node.name, "-o", "json", check=False)
    if out.returncode != 0:
        return False
    conditions = json.loads(out.stdout)["status"].get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def dns_ready(cluster: RunningCluster) -> bool:
    return cluster.probe_ok(f"http://{NODE_IP}:8181/ready")


def policy_ready(cluster: RunningCluster, node: ClusterNode) -> bool:
    """kube-router's controllers answer healthy once their caches synced and their first sync ran."""
    return cluster.probe_ok(f"http://127.0.0.1:{KUBE_ROUTER_HEALTH_PORT}/healthz", node)
