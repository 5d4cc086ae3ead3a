"""Addresses inside the cluster's own network namespace: nothing outside it can see them."""

NODE_IP = "10.99.0.2"
GATEWAY_IP = "10.99.0.1"
POD_CIDR = "10.244.0.0/24"
SERVICE_CIDR = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"
API_PORT = 6443
