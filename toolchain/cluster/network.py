"""Addresses inside the cluster's own network namespaces: nothing outside them can see them.

Node 0 shares the control plane's namespace and address (NODE_IP); node i (1..MAX_NODES-1) has
one of its own on the same /24, the nodes' network, which the switch namespace joins. Each node
gives its pods a /24 of CLUSTER_CIDR, and every namespace routes each other node's /24 to that node.
"""

NODE_IP = "10.99.0.2"  # the control plane's address, and node 0's
GATEWAY_IP = "10.99.0.1"  # nothing answers there: the default route leads nowhere
NODE_NETWORK_PREFIX = 24
CLUSTER_CIDR = "10.244.0.0/16"
SERVICE_CIDR = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"
API_PORT = 6443
MAX_NODES = 8


def node_ip(index: int) -> str:
    return NODE_IP if index == 0 else f"10.99.0.{10 + index}"


def pod_cidr(index: int) -> str:
    return f"10.244.{index}.0/24"
