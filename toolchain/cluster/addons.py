"""The cluster's add-ons, each a binary of the toolchain run as a process beside CoreDNS: the JobSet
and Kueue controllers (toolchain/addons/controller_addon.py) and Volcano's scheduler (toolchain/addons/volcano.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from toolchain.addons import volcano
from toolchain.apiserver import certificates
from toolchain.addons.controller_addon import AddOn, ControllerAddOn
from toolchain.addons.jobset import JOBSET
from toolchain.addons.kueue import KUEUE
from toolchain.addons.volcano import VOLCANO

from .control_plane import LOCAL_PROVISIONER
from .running import RunningCluster


# In this order (Kueue manages JobSets when JobSet's CRD is there when it starts).
ADDONS: dict[str, AddOn] = {addon.name: addon for addon in (JOBSET, KUEUE, VOLCANO)}


def start_addon(cluster: RunningCluster, addon: AddOn, binary: str, deadline: float) -> None:
    if isinstance(addon, ControllerAddOn):
        _start_controller(cluster, addon, binary, deadline)
    else:
        _start_volcano(cluster, binary, deadline)


def _start_controller(cluster: RunningCluster, addon: ControllerAddOn, binary: str, deadline: float) -> None:
    """A controller as a process beside CoreDNS; see toolchain/addons/controller_addon.py for why."""
    install = addon.install_manifests(binary)
    pki, home = cluster.run_dir / "pki", cluster.run_dir / addon.name
    certs = home / "certs"
    certs.mkdir(parents=True)
    # controller-runtime's webhook server reads tls.crt and tls.key from its certDir.
    certificates.sign_serving(pki, f"{addon.name}-webhook", f"{addon.name}-webhook", ["IP:127.0.0.1"], days=30,
                              key=certs / "tls.key", cert=certs / "tls.crt")  # fmt: skip
    (home / "config.json").write_text(addon.manager_configuration(certs, cluster.addons))
    for directory in addon.fixed_cert_dirs:
        cluster.node.bind_mount(certs, directory)
    # The CRDs are larger than client-side apply's annotation allows: server-side apply.
    _apply_server_side(cluster, addon.api_objects(install, (pki / "ca.crt").read_bytes()))
    # A manager started before its CRDs are served waits on its informers until it gives up.
    for crd in addon.crds:
        cluster.daemons.wait(lambda: _crd_established(cluster, crd), deadline, f"CRD {crd} established")
    cluster.spawn(addon.manager, [binary, "--config", str(home / "config.json"), "--kubeconfig", str(pki / f"{addon.name}.kubeconfig")])
    cluster.daemons.wait(lambda: cluster.probe_ok(f"http://127.0.0.1:{addon.health_port}/readyz"), deadline,
                         f"the {addon.manager}'s /readyz")  # fmt: skip
    _apply_server_side(cluster, addon.webhook_configurations(install, (pki / "ca.crt").read_bytes()))
    cluster.daemons.wait(lambda: _webhooks_answer(cluster, addon), deadline, f"{addon.name}'s webhooks answering the API server")


def _start_volcano(cluster: RunningCluster, binary: str, deadline: float) -> None:
    """Volcano's scheduler as a process beside CoreDNS; see toolchain/addons/volcano.py for why."""
    crds_dir = Path(binary).resolve().parent / volcano.CRDS_DIR
    _apply_server_side(cluster, volcano.api_objects(crds_dir))
    for crd in volcano.ESTABLISHED:
        cluster.daemons.wait(lambda: _crd_established(cluster, crd), deadline, f"CRD {crd} established")
    _apply_server_side(cluster, [volcano.default_queue()])
    kubeconfig = cluster.run_dir / "pki" / f"{VOLCANO.name}.kubeconfig"
    cluster.spawn(VOLCANO.manager, [binary, *volcano.scheduler_args(kubeconfig, LOCAL_PROVISIONER)])
    cluster.daemons.wait(lambda: cluster.probe_ok(f"http://127.0.0.1:{volcano.HEALTH_PORT}/healthz"), deadline,
                         "the Volcano scheduler's /healthz")  # fmt: skip


def _apply_server_side(cluster: RunningCluster, objects: list[dict[str, Any]]) -> None:
    cluster.kubectl("apply", "--server-side", "--field-manager=ddp-infra-cluster", "-f", "-",
                    input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))  # fmt: skip


def _crd_established(cluster: RunningCluster, name: str) -> bool:
    out = cluster.kubectl("get", "crd", name, "-o", "json", check=False)
    conditions = json.loads(out.stdout).get("status", {}).get("conditions", []) if out.returncode == 0 else []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def _webhooks_answer(cluster: RunningCluster, addon: ControllerAddOn) -> bool:
    out = cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(addon.probe), check=False)
    return out.returncode == 0 and addon.probe_answered(json.loads(out.stdout))
