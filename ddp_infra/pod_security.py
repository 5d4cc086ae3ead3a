"""The strictest Pod Security Standard a pod spec meets: restricted, baseline or privileged.

The namespace the stack creates enforces (and warns on) that level, so it is as strict as the
pods allow and no stricter: the trainer's own pods meet `restricted`, and an escape-hatch
sidecar that needs more lowers the level instead of being refused at admission. Only the
rules a pod of this program can break are checked (https://kubernetes.io/docs/concepts/security/pod-security-standards/).
"""

from __future__ import annotations

from typing import Any, Iterator

RESTRICTED, BASELINE, PRIVILEGED = "restricted", "baseline", "privileged"
# Capabilities baseline lets a container add; restricted lets it add NET_BIND_SERVICE only.
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
    "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
SECCOMP_ALLOWED = {"RuntimeDefault", "Localhost"}


def _containers(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def _breaks_baseline(spec: dict[str, Any]) -> bool:
    if any(spec.get(key) for key in ("hostNetwork", "hostPID", "hostIPC")):
        return True
    if any("hostPath" in volume for volume in spec.get("volumes") or []):
        return True
    if (spec.get("securityContext") or {}).get("seccompProfile", {}).get("type") == "Unconfined":
        return True
    for container in _containers(spec):
        context = container.get("securityContext") or {}
        if context.get("privileged") or context.get("procMount") == "Unmasked":
            return True
        if set((context.get("capabilities") or {}).get("add") or []) - BASELINE_CAPABILITIES:
            return True
        if (context.get("seccompProfile") or {}).get("type") == "Unconfined":
            return True
        if any(port.get("hostPort") for port in container.get("ports") or []):
            return True
    return False


def _meets_restricted(spec: dict[str, Any]) -> bool:
    pod = spec.get("securityContext") or {}
    if any(not set(volume) - {"name"} <= RESTRICTED_VOLUMES for volume in spec.get("volumes") or []):
        return False
    if pod.get("runAsUser") == 0:
        return False
    for container in _containers(spec):
        context = container.get("securityContext") or {}
        if context.get("allowPrivilegeEscalation") is not False:
            return False
        if not context.get("runAsNonRoot", pod.get("runAsNonRoot")) or context.get("runAsUser") == 0:
            return False
        seccomp = (context.get("seccompProfile") or pod.get("seccompProfile") or {}).get("type")
        if seccomp not in SECCOMP_ALLOWED:
            return False
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []) or set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}:
            return False
    return True


def pod_security_level(spec: dict[str, Any]) -> str:
    """The strictest standard `spec` (a pod spec) meets."""
    if _breaks_baseline(spec):
        return PRIVILEGED
    return RESTRICTED if _meets_restricted(spec) else BASELINE
