"""The Python language host's question of the project's virtualenv: which packages it holds, asked at
every command to find the Pulumi ones' plugins (`python -m pip list -v --format json`, 0.6 s of CPU
for pip's import). The toolchain's wrapper of the host has it asked of python-packages instead
(toolchain/build/python-packages.sh), which must answer as pip does."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from pulumi_project import REPO, toolchain_bin_dir

PIP_LIST = ["-m", "pip", "list", "-v", "--format", "json"]
LAUNCHED = re.compile(r"Language host launching process: (\S+) -m pip list -v --format json")


def listed(command: list[str], **env: str) -> list[tuple[str, str, str]]:
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env={**os.environ, **env})
    assert done.returncode == 0, done.stderr
    return [(package["name"], package["version"], package["location"]) for package in json.loads(done.stdout)]


def test_the_virtualenvs_packages_are_listed_as_pip_lists_them():
    """Every package pip lists, with its name, version and location (pip sorts them by name, which the
    host does not need); the SDK's and the provider's among them."""
    python = str(REPO / ".venv" / "bin" / "python")
    answered = listed([str(toolchain_bin_dir() / "python-packages"), *PIP_LIST], PULUMI_PACKAGES_PYTHON=python)
    assert sorted(answered) == sorted(listed([python, *PIP_LIST]))
    assert {"pulumi", "pulumi_kubernetes"} <= {name.replace("-", "_") for name, _, _ in answered}


def test_any_other_command_runs_with_the_virtualenvs_python_as_given():
    python = REPO / ".venv" / "bin" / "python"
    code = "import sys; print(sys.prefix, sys.argv[1:])"
    done = subprocess.run([str(toolchain_bin_dir() / "python-packages"), "-c", code, "-m", "pip", "list"], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PULUMI_PACKAGES_PYTHON": str(python)})  # fmt: skip
    assert done.stdout.split(" ", 1) == [str(python.parent.parent), "['-m', 'pip', 'list']\n"], done.stderr


def test_the_engine_asks_python_packages_unless_the_user_names_a_python_of_their_own(dev):
    """`pulumi preview` with the host's log: the question went to the toolchain's script (a path the host
    joined to the virtualenv's bin directory), and, with PULUMI_PYTHON_CMD set, to the user's."""
    project = dev.project

    def asked(**env: str) -> Path:
        saved = dict(project.env)
        project.env.update(env)
        try:
            done = project.run("preview", "--stack", "dev", "--logtostderr", "--logflow", "-v=5")
        finally:
            project.env.clear()
            project.env.update(saved)
        launched = LAUNCHED.search(done.output)
        assert launched, done.output[-3000:]
        return Path(os.path.normpath(project.dir / launched.group(1)))

    assert asked() == toolchain_bin_dir() / "python-packages"
    assert asked(PULUMI_PYTHON_CMD="python") == project.dir / ".venv" / "bin" / "python"
