"""Where a run's outputs lie on this machine: the local volume behind the outputs claim, and what
the trainer wrote there."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ddp_infra.names import APP_NAME
from observe.kubectl import Kubectl


def outputs_volume(kubectl: Kubectl) -> Optional[Path]:
    """The directory of the local volume bound to the namespace's outputs claim (None if unbound)."""
    claims = kubectl.items("pvc", f"app.kubernetes.io/name={APP_NAME}-outputs")
    volume = claims[0]["spec"].get("volumeName") if claims else None
    if not volume:
        return None
    local = kubectl.json("get", "pv", volume)["spec"].get("local", {})
    return Path(local["path"]) if local.get("path") else None


def describe(run_dir: Path) -> list[str]:
    """What the run directory holds, a line each."""
    epochs = sorted((p.name for p in run_dir.glob("epoch-*")), key=lambda name: int(name.split("-")[1]))
    best = run_dir / "best"
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").glob("ckpt-*") if p.is_dir())
    rows = [f"epochs: {', '.join(epochs) or 'none'}" + (f"; best -> {best.readlink()}" if best.is_symlink() else ""),
            f"metrics: {run_dir / 'metrics.jsonl'}",
            f"checkpoints: {len(checkpoints)} in {run_dir / 'checkpoints'}" + (f" (newest {checkpoints[-1]})" if checkpoints else "")]  # fmt: skip
    return rows
