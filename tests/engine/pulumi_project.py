"""A copy of the project that the real Pulumi CLI runs, the way a user runs it.

The copy lives in a temporary directory with its own file state backend and a passphrase secrets
provider, so the tests need no cloud account and never touch the repository's files, the user's
stacks or the user's clusters (KUBECONFIG points at a file the tests write, or at nothing).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import pwd
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import pytest
import yaml

from ddp_infra.names import PROJECT
from demo.stack import PROGRAM_DIRS, PROGRAM_FILES, file_backend_url
from refusals import skip_if_refused_else_fail

REPO = Path(__file__).resolve().parents[2]
PROJECT_DIRS = (*PROGRAM_DIRS, "stacks")
PASSPHRASE = "engine-tests-passphrase"
# The engine starts Python and the provider on every command; on a busy 2-core machine that alone
# takes tens of seconds, so the bound is wide: it is there to stop a hang, not to time anything.
COMMAND_TIMEOUT_S = 600


def user_database_home() -> Path:
    """The user's home as the user database gives it, which the CLI asks for; it does not read $HOME."""
    return Path(pwd.getpwuid(os.getuid()).pw_dir)


def cli_home() -> Path:
    """Where the Pulumi CLI keeps plugins and credentials: $PULUMI_HOME, else `.pulumi` in the
    user database's home."""
    if os.environ.get("PULUMI_HOME"):
        return Path(os.environ["PULUMI_HOME"])
    return user_database_home() / ".pulumi"


@functools.cache
def toolchain_bin_dir() -> Path:
    build = REPO / "toolchain" / "build.sh"
    if not build.exists():
        pytest.fail(f"{build} is missing: the engine tests need the project's toolchain", pytrace=False)
    bin_dir = subprocess.run([str(build), "--bin-dir"], capture_output=True, text=True, check=True, timeout=60)
    return Path(bin_dir.stdout.strip())


def toolchain_path() -> str:
    """PATH with the toolchain's bin directory first, so the project's pinned CLI is the one run."""
    return f"{toolchain_bin_dir()}{os.pathsep}{os.environ.get('PATH', '')}"


def require_tool(name: str, path: str) -> str:
    """The tool's path. Else a skip only where toolchain/build.sh proved it cannot be built here
    (its UNAVAILABLE file quotes the proxy's answer); otherwise a failure that says what is missing."""
    found = shutil.which(name, path=path)
    if found is None:
        _missing(name, "is not on PATH or in the toolchain")
    return found


def _missing(name: str, what: str) -> None:
    skip_if_refused_else_fail(name, toolchain_bin_dir(), f"`{name}` {what}")


def pinned(package: str) -> str:
    """The version requirements.txt pins `package` at."""
    pins = dict(line.split("==", 1) for line in (REPO / "requirements.txt").read_text().split() if "==" in line)
    return pins[package]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text.lstrip("v").split("-")[0].split("+")[0])[:3])


def sdk_minimum_cli() -> str:
    """The oldest Pulumi CLI the installed Python SDK works with (its automation API's minimum)."""
    from pulumi.automation._minimum_version import _MINIMUM_VERSION

    return str(_MINIMUM_VERSION)


# The engines found, by the PATH, plugin directory and home they were looked for with.
_ENGINES: dict[tuple[str, str | None, str | None], str] = {}


def require_engine(env: dict[str, str]) -> str:
    """The `pulumi` CLI, once it is recent enough and the language host and the Kubernetes
    provider it needs are there too; else a skip that names what is missing. Looked at once a
    process for each PATH, plugin directory and home: two `pulumi` commands, 0.5 CPU-s, for each
    of the suite's hundreds of projects."""
    key = (env["PATH"], env.get("PULUMI_HOME"), env.get("HOME"))
    if key not in _ENGINES:
        _ENGINES[key] = _engine(env)
    return _ENGINES[key]


def _engine(env: dict[str, str]) -> str:
    pulumi = require_tool("pulumi", env["PATH"])
    done = subprocess.run([pulumi, "version"], env=env, capture_output=True, text=True, timeout=120)
    minimum = sdk_minimum_cli()
    if done.returncode != 0 or _version(done.stdout.strip()) < _version(minimum):
        pytest.fail(f"the Pulumi CLI at {pulumi} is {done.stdout.strip() or done.stderr.strip()}, older than v{minimum}")
    # The CLI finds a language host beside itself or on PATH, as the official installer lays them out.
    language_host = "pulumi-language-python"
    if shutil.which(language_host, path=f"{Path(pulumi).parent}{os.pathsep}{env['PATH']}") is None:
        _missing(language_host, f"is neither beside {pulumi} nor on PATH")
    version = pinned("pulumi-kubernetes")
    if version not in provider_versions(installed_plugins(pulumi, env)):
        # On PATH, the engine takes the provider as it is (an ambient plugin).
        if shutil.which("pulumi-resource-kubernetes", path=env["PATH"]) is None:
            _missing("pulumi-resource-kubernetes", f"{version} is neither an installed plugin nor on PATH")
    return pulumi


def installed_plugins(pulumi: str, env: dict[str, str]) -> list[dict]:
    """`pulumi plugin ls --json`: the plugins the CLI has in its home."""
    listed = subprocess.run([pulumi, "plugin", "ls", "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, f"pulumi plugin ls failed:\n{listed.stderr}"
    return json.loads(listed.stdout or "[]") or []


def provider_versions(plugins: list[dict]) -> list[str]:
    """The versions of the Kubernetes provider among `plugins`."""
    return [p["version"] for p in plugins if (p["kind"], p["name"]) == ("resource", "kubernetes")]


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

    def __init__(self, root: Path, source: Path = REPO, backend: Optional[Path] = None, program: Optional[Path] = None):
        """program: a project of the test's own, run where it is (its Pulumi.yaml names its virtualenv)."""
        self.root = root
        self.dir = program or root / "project"
        self.backend = backend or root / "state"
        self.backend.mkdir(parents=True, exist_ok=True)
        if program is None:
            self.dir.mkdir(parents=True)
            for name in PROGRAM_FILES:
                shutil.copy2(source / name, self.dir / name)
            for name in PROJECT_DIRS:
                shutil.copytree(source / name, self.dir / name, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
            # The language host runs the program with the virtualenv Pulumi.yaml names.
            (self.dir / ".venv").symlink_to((REPO / ".venv").resolve())
        self.kubeconfig = root / "kubeconfig"  # absent unless a test writes one
        self.env = self._environment()
        self.pulumi_bin = require_engine(self.env)

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
            PULUMI_BACKEND_URL=file_backend_url(self.backend),
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

    def config_set(self, stack: str, key: str, value: str, secret: bool = False, path: bool = False) -> Result:
        flags = [*(["--secret"] if secret else []), *(["--path"] if path else [])]
        return self.run("config", "set", "--stack", stack, *flags, key, value)

    @contextlib.contextmanager
    def stack_file_restored(self, stack: str) -> Iterator[None]:
        """Whatever the block does to the stack file, it is as it was afterwards."""
        original = self.stack_file(stack).read_bytes()
        try:
            yield
        finally:
            self.stack_file(stack).write_bytes(original)

    @contextlib.contextmanager
    def config_changed(self, stack: str, **values: str) -> Iterator[None]:
        """Sets config keys for the duration of the block, then restores the stack file as it was."""
        with self.stack_file_restored(stack):
            for key, value in values.items():
                self.config_set(stack, key, value)
            yield

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

    def kubernetes_providers(self, stack: str) -> list[str]:
        """The names of the Kubernetes providers the stack's state holds."""
        resources = self.export_state(stack)["deployment"]["resources"]
        return [resource_name(r["urn"]) for r in resources if r["type"] == "pulumi:providers:kubernetes"]

    def stack_outputs(self, stack: str) -> Result:
        return self.run("stack", "output", "--stack", stack, "--json")


# Steps that change nothing: an unchanged resource, and the program's read of its own last outputs
# (ddp_infra.claim_changes), which every preview and update does.
UNCHANGED_OPS = ("same", "read")


def changed_steps(preview: dict) -> list[dict]:
    """The steps of `pulumi preview --json` that change something."""
    return [step for step in preview["steps"] if step["op"] not in UNCHANGED_OPS]


def changed_ops(summary: dict) -> set[str]:
    """The operations of a `changeSummary` other than those that change nothing."""
    return {op for op, count in summary.items() if count and op not in UNCHANGED_OPS}


def resource_type(urn: str) -> str:
    """`kubernetes:apps/v1:StatefulSet` from urn:pulumi:<stack>::<project>::<parent types>$<type>::<name>."""
    return urn.split("::")[2].rsplit("$", 1)[-1]


def resource_name(urn: str) -> str:
    return urn.split("::", 3)[3]
