"""`python -m trainer.diagnose`: the preflight's report on demand, for `kubectl exec` into a pod.

It never starts training. It resolves the world from the pod env, probes the master (once, or
for --wait seconds), and reports the interface, /dev/shm, GPUs, torch and the contract env with
secrets masked. Exit status 0 when nothing failed.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import Mapping

from trainer import contract as c
from trainer.pod.preflight import FAIL, OK, Check, check_gpus, check_infiniband, check_shm, preflight
from trainer.pod.env import resolve_world
from trainer.pod.env_reader import WorldError

SECRETS = {c.HF_TOKEN.name, c.HUGGINGFACE_HUB_TOKEN.name}


def contract_env(env: Mapping[str, str]) -> list[str]:
    names = [v.name for v in c.ALL] + [c.LEGACY_POD_NUMS, c.LEGACY_POD_PORT, c.LEGACY_JOB_NAME, c.JOB_COMPLETION_INDEX]
    lines = []
    for name in names:
        if name in env:
            shown = "<set, hidden>" if name in SECRETS else repr(env[name])
            lines.append(f"  {name}={shown}")
    return lines


def torch_check() -> Check:
    try:
        import torch
    except ImportError as exc:
        return Check("torch", FAIL, f"cannot import torch: {exc}", "rebuild the image from trainer/Dockerfile")
    cuda = torch.cuda.is_available()
    detail = f"torch {torch.__version__}, CUDA available: {cuda}, devices: {torch.cuda.device_count() if cuda else 0}"
    if cuda and torch.distributed.is_nccl_available():
        detail += f", NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}"
    return Check("torch", OK, detail)


def diagnose(env: Mapping[str, str], hostname: str, wait_s: float) -> list[Check]:
    try:
        world = resolve_world(env, hostname)
    except WorldError as exc:
        print(f"[DIAG] {exc}")
        checks = [Check("pod env", FAIL, f"{len(exc.problems)} problem(s), listed above", "fix the pod env (see trainer/contract.py)")]
        checks += [check_shm(), check_gpus(None, 1, env=env), check_infiniband(env)]
    else:
        print(world.summary())
        checks = [Check("pod env", OK, f"{world.scheme} scheme, node rank from {world.rank_source}")]
        checks += preflight(world, env, wait_s).checks
    return checks + [torch_check()]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.diagnose", description=__doc__)
    parser.add_argument("--wait", type=float, default=0.0, help="seconds to keep trying the master (0: one probe)")
    args = parser.parse_args(argv)
    env = dict(os.environ)
    print(f"[DIAG] host {socket.gethostname()}; contract env:")
    print("\n".join(contract_env(env)) or "  (none of the contract's variables is set)")
    checks = diagnose(env, socket.gethostname(), args.wait)
    for check in checks:
        print(check.line())
    failed = [check.name for check in checks if check.status == FAIL]
    print(f"[DIAG] {'failed: ' + ', '.join(failed) if failed else 'all checks passed'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
