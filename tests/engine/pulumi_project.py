"""A copy of the project that the real Pulumi CLI runs, the way a user runs it.

The copy lives in a temporary directory with its own file state backend and a passphrase secrets
provider, so the tests need no cloud account and never touch the repository's files, the user's
stacks or the user's clusters (KUBECONFIG points at a file the tests write, or at nothing).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import yaml

REPO = Path(__file__).resolve().parents[2]
PROJECT = "ddp-infra"
PROJECT_FILES = ("Pulumi.yaml", "__main__.py", "requirements.txt")
PROJECT_DIRS = ("ddp_infra", "trainer", "stacks")
PASSPHRASE = "engine-tests-passphrase"
# The engine starts Python and the provider on every command; on a busy 2-core machine that alone
# takes tens of seconds, so the bound is wide: it is there to stop a hang, not to time anything.
COMMAND_TIMEOUT_S = 600


def _load(relative_path: str):
    """A module of the repository that is not in a package (a script, a toolchain helper)."""
    path = REPO / relative_path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


preview_diff = _load("scripts/preview_diff.py")


def local_api_server_class():
    """toolchain/apiserver.py's LocalApiServer: etcd + kube-apiserver on loopback."""
    return _load("toolchain/apiserver.py").LocalApiServer


def toolchain_path() -> str:
    """PATH with the toolchain's bin directory first, so the project's pinned CLI is the one run."""
    build = REPO / "toolchain" / "build.sh"
    if not build.exists():
        raise AssertionError(f"{build} is missing: the engine tests need the project's toolchain")
    bin_dir = subprocess.run([str(build), "--bin-dir"], capture_output=True, text=True, check=True, timeout=60)
    return f"{bin_dir.stdout.strip()}{os.pathsep}{os.environ.get('PATH', '')}"


def require_tool(name: str, path: str) -> str:
    """The tool's path, or a failure that says how to get it (a missing tool must not skip a test)."""
    found = shutil.which(name, path=path)
    if found is None:
        raise AssertionError(f"`{name}` is not on PATH or in the toolchain: run `make setup` (toolchain/build.sh)")
    return found


@dataclass
class Result:
    command: list[str]
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def describe(self) -> str:
        return f"$ {' '.join(self.command)}\nexit status {self.returncode}\n{self.output[-6000:]}"


class PulumiProject:
    """One copy of the project with its own state backend, driven through the `pulumi` CLI."""

    def __init__(self, root: Path, source: Path = REPO, backend: Optional[Path] = None):
        self.root = root
        self.dir = root / "project"
        self.dir.mkdir(parents=True)
        self.backend = backend or root / "state"
        self.backend.mkdir(exist_ok=True)
        for name in PROJECT_FILES:
            shutil.copy2(source / name, self.dir / name)
        for name in PROJECT_DIRS:
            shutil.copytree(source / name, self.dir / name, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
        # The language host runs the program with the virtualenv Pulumi.yaml names.
        (self.dir / ".venv").symlink_to((REPO / ".venv").resolve())
        self.kubeconfig = root / "kubeconfig"  # absent unless a test writes one
        self.env = self._environment()
        self.pulumi_bin = require_tool("pulumi", self.env["PATH"])

    @classmethod
    def sharing_backend_of(cls, other: "PulumiProject", root: Path) -> "PulumiProject":
        """A second checkout of `other`'s project and stack files, in another directory, on the same state."""
        return cls(root, source=other.dir, backend=other.backend)

    def _environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PULUMI_", "KUBE"))}
        # The user's plugin directory holds the provider that toolchain/build.sh installed.
        if "PULUMI_HOME" in os.environ:
            env["PULUMI_HOME"] = os.environ["PULUMI_HOME"]
        env.update(
            PATH=toolchain_path(),
            PULUMI_BACKEND_URL=self.backend.as_uri(),
            PULUMI_CONFIG_PASSPHRASE=PASSPHRASE,
            PULUMI_SKIP_UPDATE_CHECK="true",
            PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION="true",
            KUBECONFIG=str(self.root / "kubeconfig"),
        )
        return env

    def run(self, *args: str, check: bool = True, timeout: float = COMMAND_TIMEOUT_S) -> Result:
        command = [self.pulumi_bin, *args, "--non-interactive"]
        done = subprocess.run(command, cwd=self.dir, env=self.env, capture_output=True, text=True, timeout=timeout)
        result = Result(["pulumi", *args], done.returncode, done.stdout, done.stderr)
        if check and result.returncode != 0:
            raise AssertionError(f"pulumi failed:\n{result.describe()}")
        return result

    # --- stacks and config ------------------------------------------------------------------------

    def init_stack(self, stack: str) -> None:
        self.run("stack", "init", stack, "--secrets-provider", "passphrase")

    def stack_file(self, stack: str) -> Path:
        return self.dir / "stacks" / f"Pulumi.{stack}.yaml"

    def stack_config(self, stack: str) -> dict:
        return (yaml.safe_load(self.stack_file(stack).read_text()) or {}).get("config") or {}

    def config_set(self, stack: str, key: str, value: str, secret: bool = False) -> None:
        self.run("config", "set", "--stack", stack, *(["--secret"] if secret else []), key, value)

    @contextlib.contextmanager
    def config_changed(self, stack: str, **values: str) -> Iterator[None]:
        """Sets config keys for the duration of the block, then restores the stack file as it was."""
        original = self.stack_file(stack).read_bytes()
        try:
            for key, value in values.items():
                self.config_set(stack, key, value)
            yield
        finally:
            self.stack_file(stack).write_bytes(original)

    def render_dir(self, stack: str) -> Optional[Path]:
        kubernetes = self.stack_config(stack).get(f"{PROJECT}:kubernetes") or {}
        render_dir = kubernetes.get("renderDir") if isinstance(kubernetes, dict) else None
        return self.dir / render_dir if render_dir else None

    # --- engine operations -----------------------------------------------------------------------

    def preview_json(self, stack: str, check: bool = True) -> tuple[Result, dict]:
        result = self.run("preview", "--stack", stack, "--json", check=check)
        return result, json.loads(result.stdout) if result.stdout.strip() else {}

    def preview_diff(self, stack: str, check: bool = True) -> Result:
        return self.run("preview", "--stack", stack, "--diff", "--color", "never", check=check)

    def up(self, stack: str) -> Result:
        return self.run("up", "--stack", stack, "--yes", "--skip-preview", "--color", "never")

    def export_state(self, stack: str) -> dict:
        return json.loads(self.run("stack", "export", "--stack", stack).stdout)

    def stack_outputs(self, stack: str) -> Result:
        return self.run("stack", "output", "--stack", stack, "--json")


def resource_type(urn: str) -> str:
    """`kubernetes:apps/v1:StatefulSet` from urn:pulumi:<stack>::<project>::<parent types>$<type>::<name>."""
    return urn.split("::")[2].rsplit("$", 1)[-1]


def resource_name(urn: str) -> str:
    return urn.split("::", 3)[3]
