"""The cluster's one node: the kubelet (on containerd, in the cluster's cgroups), kube-proxy, and
CoreDNS, which answers for the cluster's domain only."""

from __future__ import annotations

import json

from .network import NODE_IP, POD_CIDR
from .running import RunningCluster


def start_node(cluster: RunningCluster, binaries: dict[str, str]) -> None:
    run_dir, pki = cluster.run_dir, cluster.run_dir / "pki"
    resolv = run_dir / "resolv.conf"
    # Pods resolve through the cluster DNS only: no name outside the cluster is forwarded anywhere.
    resolv.write_text(f"nameserver {NODE_IP}\n")
    kubelet_config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # cgroup v1 without systemd as PID 1
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "cgroupRoot": cluster.cgroup_root,
        "containerRuntimeEndpoint": f"unix://{cluster.containerd.socket}",
        "clusterDNS": [NODE_IP],
        "clusterDomain": cluster.domain,
        "resolvConf": str(resolv),
        "address": NODE_IP,
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
    (run_dir / "kubelet.json").write_text(json.dumps(kubelet_config, indent=2))
    cluster.spawn("kubelet", [
        binaries["kubelet"],
        "--config", str(run_dir / "kubelet.json"),
        "--kubeconfig", str(pki / "kubelet.kubeconfig"),
        "--hostname-override", cluster.node_name,
        "--node-ip", NODE_IP,
        "--root-dir", "/var/lib/kubelet",
        "--cert-dir", "/var/lib/kubelet/pki",
    ])  # fmt: skip
    cluster.spawn("kube-proxy", [
        binaries["kube-proxy"],
        "--kubeconfig", str(pki / "kube-proxy.kubeconfig"),
        "--hostname-override", cluster.node_name,
        "--proxy-mode", "iptables",
        "--cluster-cidr", POD_CIDR,
        # change no machine-wide conntrack setting
        "--conntrack-max-per-core", "0",
        "--conntrack-tcp-timeout-established", "0s",
        "--conntrack-tcp-timeout-close-wait", "0s",
        "--metrics-bind-address", "127.0.0.1:10249",
        "--healthz-bind-address", "127.0.0.1:10256",
    ])  # fmt: skip
    corefile = run_dir / "Corefile"
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


def node_ready(cluster: RunningCluster) -> bool:
    out = cluster.kubectl("get", "node", cluster.node_name, "-o", "json", check=False)
    if out.returncode != 0:
        return False
    conditions = json.loads(out.stdout)["status"].get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def dns_ready(cluster: RunningCluster) -> bool:
    return cluster.probe_ok(f"http://{NODE_IP}:8181/ready")
