"""`python -m trainer.diagnose`: the preflight report on demand, secrets hidden."""

from __future__ import annotations

import subprocess

import pytest
from trainer_testing import PYTHON, REPO, clean_env, free_port, pod_env

from trainer import contract as c

pytestmark = pytest.mark.timeout(60)
SECRET = "hf_do_not_print_me"


def diagnose(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "trainer.diagnose"], env=clean_env(**env), cwd=REPO,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_reports_every_check_and_hides_the_token():
    result = diagnose(pod_env("ddp-0", free_port(), **{c.HF_TOKEN.name: SECRET}))
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert SECRET not in out + result.stderr
    assert f"{c.HF_TOKEN.name}=<set, hidden>" in out
    assert "[DDP] pod_index=0 nnodes=2" in out
    for check in ("pod env", "reach 127.0.0.1", "network interface", "shared memory", "GPUs", "torch"):
        assert f" {check}" in out
    assert "[DIAG] all checks passed" in out


def test_an_unreachable_master_and_a_broken_env_fail_with_next_steps():
    closed = diagnose(pod_env("ddp-1", free_port()))
    assert closed.returncode == 1
    assert "FAIL reach 127.0.0.1" in closed.stdout and "next:" in closed.stdout

    broken = diagnose({c.NNODES.name: "many"})
    assert broken.returncode == 1
    assert f"  - {c.NNODES.name}: got 'many'" in broken.stdout
    assert "shared memory" in broken.stdout, "checks that need no world still run"
