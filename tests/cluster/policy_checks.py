"""Who reaches whom in the cluster: pods made to probe it, the TCP connections they open, and the
check that the stack's NetworkPolicies admit the world's own pods and no other."""

from __future__ import annotations

import json

from cluster_testing import NAMESPACE, SERVICE, STORE, WORKLOAD, exec_python, get, is_store_pod, pods, running, wait_for


def pause_pod(name: str, image: str, labels: dict[str, str], cpu: str | None = None) -> dict:
    """A pause pod, restricted like the trainer's; with `cpu`, it requests that much."""
    resources = {"limits": {"memory": "16Mi"}, **({"requests": {"cpu": cpu}} if cpu else {})}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "hostname": name, "subdomain": SERVICE,
            "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "pause", "image": image, "imagePullPolicy": "IfNotPresent", "resources": resources,
                            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}],
        },
    }  # fmt: skip


# Connects to each of PORTS at ADDRESS and prints {port: "open", or why not}.
CONNECT = """
import json, socket
reached = {}
for port in PORTS:
    probe = socket.socket()
    probe.settimeout(3)
    try:
        probe.connect((ADDRESS, port))
        reached[port] = "open"
    except OSError as error:
        reached[port] = error.strerror or type(error).__name__
    finally:
        probe.close()
print(json.dumps(reached))
"""
# The TCP ports a pod listens on: its network namespace's sockets in state LISTEN (0A).
LISTENING = """
ports = set()
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    for row in open(table).read().splitlines()[1:]:
        local, state = row.split()[1], row.split()[3]
        if state == "0A":
            ports.add(int(local.rsplit(":", 1)[1], 16))
print(" ".join(map(str, sorted(ports))))
"""


def connect(cluster, pod: str, address: str, ports: list[int]) -> dict[int, str]:
    out = exec_python(cluster, NAMESPACE, pod, CONNECT.replace("PORTS", repr(ports)).replace("ADDRESS", repr(address)))
    return {int(port): result for port, result in json.loads(out).items()}


def document(documents: list[dict], kind: str, name: str) -> dict:
    return next(d for d in documents if d["kind"] == kind and d["metadata"]["name"] == name)


def the_network_policies_admit_only_the_world(cluster, names: dict[int, str], documents: list[dict], outsider_node: str | None = None) -> None:
    """While the world trains, a pod of the namespace outside the world reaches none of pod 0's
    listening ports (Gloo's, the workers' store), which pod 1 reaches, nor the rendezvous store's
    pod, at its address or its Service's, which pod 1 reaches too; with a policy removed, it
    reaches what that policy kept it from. kube-router enforces the policies on each node.
    `outsider_node`: the node the outsider runs on (the scheduler's choice by default)."""
    pod0 = get(cluster, "pod", names[0], NAMESPACE)
    address = pod0["status"]["podIP"]
    store_service = document(documents, "Service", STORE)
    port = store_service["spec"]["ports"][0]["port"]
    store_ip = get(cluster, "service", STORE, NAMESPACE)["spec"]["clusterIP"]
    (store_pod,) = [pod for pod in pods(cluster, NAMESPACE, store=True).values() if is_store_pod(pod)]
    store_address = store_pod["status"]["podIP"]

    def listening() -> list[int]:
        return [int(found) for found in exec_python(cluster, NAMESPACE, names[0], LISTENING).split()]

    # pod 0 hosts no rendezvous store: what it listens on is the process group's (Gloo's, the workers' store)
    ports = wait_for(lambda: found if (found := listening()) else None, 180, "pod 0's process group listeners", interval=2)
    assert port not in ports, ports
    assert "open" in connect(cluster, names[1], address, ports).values()
    assert connect(cluster, names[1], store_ip, [port]) == {port: "open"}

    image = pod0["spec"]["containers"][0]["image"]
    outsider = pause_pod("outsider", image, {"app": "outsider"})
    # a container named as the trainer's, so that exec_python finds it
    outsider["spec"]["containers"][0].update(name="trainer", command=["python", "-c", "import time; time.sleep(3600)"])
    outsider["spec"]["containers"][0]["resources"]["limits"]["memory"] = "128Mi"
    if outsider_node:
        outsider["spec"]["nodeName"] = outsider_node
    cluster.kubectl("apply", "-f", "-", input=json.dumps(outsider))
    wait_for(lambda: running(get(cluster, "pod", "outsider", NAMESPACE)), 120, "the outsider pod to run")
    blocked = {**connect(cluster, "outsider", address, ports), **connect(cluster, "outsider", store_address, [port]),
               "service": connect(cluster, "outsider", store_ip, [port])[port]}  # fmt: skip
    assert "open" not in blocked.values(), blocked

    for policy_name, target, target_port in ((f"{WORKLOAD}-world", address, ports[0]), (STORE, store_address, port)):
        policy = document(documents, "NetworkPolicy", policy_name)
        cluster.kubectl("delete", "networkpolicy", policy_name, "-n", NAMESPACE)
        wait_for(lambda: connect(cluster, "outsider", target, [target_port]) == {target_port: "open"}, 60,
                 f"the outsider to reach {target}:{target_port} once {policy_name} is gone", interval=2)  # fmt: skip
        cluster.kubectl("apply", "-f", "-", input=json.dumps(policy))  # the program's own manifest
        wait_for(lambda: "open" not in connect(cluster, "outsider", target, [target_port]).values(), 60,
                 f"the restored {policy_name} to block the outsider again", interval=2)  # fmt: skip
    cluster.kubectl("delete", "pod", "outsider", "-n", NAMESPACE, "--wait=true", "--grace-period=1")
