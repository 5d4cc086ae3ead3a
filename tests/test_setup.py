"""`make setup` (scripts/setup.sh): its two lanes, the virtualenv and the tools built from Go modules
in one and the images in the other, run at the same time, and setup fails where either fails."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def setup(**env: str) -> subprocess.CompletedProcess:
    """scripts/setup.sh with the interpreter that made the virtualenv (which keys it): it finds it."""
    venv = dict(line.split(" = ", 1) for line in (REPO / ".venv" / "pyvenv.cfg").read_text().splitlines() if " = " in line)
    env = {**os.environ, "PYTHON": venv["executable"], **env}
    return subprocess.run([str(REPO / "scripts" / "setup.sh")], env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def done() -> subprocess.CompletedProcess:
    """A setup on this machine, where `make setup` has run: every step finds its work done."""
    result = setup()
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_a_setup_with_everything_in_place_goes_through_both_lanes(done):
    assert "[setup] virtualenv up to date" in done.stdout
    assert "[toolchain] ready: " in done.stdout  # the images' lane: up to date, or built where a tar was missing
    assert "[images] up to date: " in done.stdout or "[images] ready: " in done.stdout, done.stdout
    assert done.stdout.rstrip().endswith("[setup] done")


def test_a_lane_that_fails_fails_setup_naming_it(done, tmp_path):
    # The images' lane refuses a trainer build context without a torch pin; the other lane goes on.
    (tmp_path / "requirements.txt").write_text("numpy==2.1.0\n")
    result = setup(DDP_INFRA_TRAINER_DIR=str(tmp_path))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "must pin torch" in result.stderr and "[setup] failed: images" in result.stderr, result.stderr
    assert "[toolchain] ready: " in result.stdout and "[setup] done" not in result.stdout
