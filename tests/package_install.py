"""ddp-infra installed as a user installs it: `pip install <repo>` into a fresh virtualenv, from the
wheels of the declared dependencies alone (the wheelhouse `make setup` downloads)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# scripts/setup.sh: the wheels of requirements.txt's pins and of the build backend, beside the virtualenv
WHEELHOUSE = Path(sys.prefix) / "program-wheels"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]  # the package's


def run(*argv: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def package_source(copy: Path) -> Path:
    """What the package is built from, as its sdist holds it, in a copy: a build writes build/ and
    *.egg-info into the tree it builds."""
    copy.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, copy / name)
    for package in ("ddp_infra", "observe", "trainer"):
        shutil.copytree(REPO / package, copy / package, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def fresh_install(source: Path, venv: Path) -> Path:
    """A fresh virtualenv at `venv` with the package built from `source` installed; its python."""
    if not (WHEELHOUSE / ".complete").is_file():
        pytest.fail(f"{WHEELHOUSE} is missing: run `make setup` (scripts/setup.sh downloads it)", pytrace=False)
    run(sys.executable, "-m", "venv", str(venv), cwd=venv.parent)
    python = venv / "bin" / "python"
    # --no-index: only what pyproject.toml declares, from the wheelhouse; a dependency it forgot is not there.
    # --no-compile: the program imports a fraction of what is installed (half the install's time went to bytecode)
    run(str(python), "-m", "pip", "install", "--quiet", "--no-compile", "--no-index", "--find-links", str(WHEELHOUSE), str(source), cwd=venv.parent)
    return python
