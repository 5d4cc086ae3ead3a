"""The demo's stack: the dev stack, deployed by the real Pulumi CLI from a copy of this checkout's
project under the cache, on a file backend there, with a generated passphrase kept beside it.

The copy's stack file is the committed dev stack's config with what a local cluster needs instead
of rendering (its kubeconfig context) and a run long enough to watch. The program files are copied
again before every command, so the demo runs this checkout's program; the stack file is kept, so a
`resize` lasts."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
from pathlib import Path
from typing import Any, Callable

import yaml

from ddp_infra.names import PROJECT
from toolchain.apiserver import tool_dir

REPO = Path(__file__).resolve().parents[1]
STACK = "dev"
PROGRAM_FILES = ("Pulumi.yaml", "__main__.py", "requirements.txt")
PROGRAM_DIRS = ("ddp_infra", "observe", "trainer")
COMMAND_TIMEOUT_S = 900
DEMO_POD_CPU = "500m"


def demo_run(epochs: int) -> list[str]:
    """The smoke task long enough to watch: 256 steps an epoch in a world of 2 (about 10 s on two
    cores), a [TRAIN] line every 16 steps, a checkpoint every 64."""
    return ["-m", "trainer.train", "smoke", "--epochs", str(epochs), "--batch", "256", "--samples", "131072",
            "--features", "128", "--classes", "4", "--lr", "3e-3", "--seed", "42", "--log-every", "16",
            "--checkpoint-every", "64"]  # fmt: skip


def file_backend_url(state_dir: Path) -> str:
    """The login the README gives: a file backend that writes no `.attrs` sidecar beside a checkpoint.
    The sidecar is written in place, and the program's read of its own last outputs during an up
    fails on a half-written one."""
    return f"{state_dir.as_uri()}?metadata=skip"


def committed_stack_config(stack: str) -> dict[str, Any]:
    """`stacks/Pulumi.<stack>.yaml` as {key without the project prefix: value}."""
    document = yaml.safe_load((REPO / "stacks" / f"Pulumi.{stack}.yaml").read_text())
    prefix = f"{PROJECT}:"
    return {key[len(prefix):]: value for key, value in document["config"].items() if key.startswith(prefix)}


def write_stack_config(stack_file: Path, values: dict[str, Any]) -> None:
    """Sets the stack file's config to `values` (keys without the project prefix), keeping the rest
    of the file (its encryption salt)."""
    document = yaml.safe_load(stack_file.read_text()) or {}
    document["config"] = {f"{PROJECT}:{key}": value for key, value in values.items()}
    # every scalar quoted: the engine reads YAML 1.2, where an unquoted 3e-3 is a number
    stack_file.write_text(yaml.safe_dump(document, default_style='"'))


class DemoStack:
    def __init__(self, home: Path, kubeconfig: str, say: Callable[[str], None]):
        self.home, self.say = home, say
        self.project = home / "project"
        self.state = home / "state"
        self.passphrase = home / "passphrase"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("PULUMI_", "KUBE"))},
            "PATH": f"{tool_dir()}{os.pathsep}{os.environ.get('PATH', '')}",
            "PULUMI_BACKEND_URL": file_backend_url(self.state),
            "PULUMI_CONFIG_PASSPHRASE_FILE": str(self.passphrase),
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",  # the provider make setup built
            "KUBECONFIG": kubeconfig,
            **({"PULUMI_HOME": os.environ["PULUMI_HOME"]} if "PULUMI_HOME" in os.environ else {}),
        }

    @property
    def stack_file(self) -> Path:
        return self.project / "stacks" / f"Pulumi.{STACK}.yaml"

    def exists(self) -> bool:
        return self.stack_file.exists()

    def prepare(self, context: str, epochs: int) -> None:
        """The project copy refreshed; the stack made, with its config, the first time."""
        self.copy_program()
        if self.exists():
            return
        self.state.mkdir(parents=True, exist_ok=True)
        if not self.passphrase.exists():
            self.passphrase.write_text(secrets.token_urlsafe(32))
            self.passphrase.chmod(0o600)
        self.pulumi("stack", "init", STACK, "--secrets-provider", "passphrase")
        config = committed_stack_config(STACK)
        config["kubernetes"] = {"context": context}  # applied to the local cluster, not rendered
        config["run"] = {**config.get("run", {}), "args": demo_run(epochs)}
        # half a CPU a pod: a world of 4 fits a 2-core machine, so a resize has room
        config["resources"]["requests"]["cpu"] = DEMO_POD_CPU
        write_stack_config(self.stack_file, config)
        self.say(f"stack {STACK}: made in {self.project}, state in {self.state}, passphrase in {self.passphrase}")

    def copy_program(self) -> None:
        (self.project / "stacks").mkdir(parents=True, exist_ok=True)
        for name in PROGRAM_FILES:
            shutil.copy2(REPO / name, self.project / name)
        for name in PROGRAM_DIRS:
            shutil.rmtree(self.project / name, ignore_errors=True)
            shutil.copytree(REPO / name, self.project / name, ignore=shutil.ignore_patterns("__pycache__"))
        venv = self.project / ".venv"  # the language host runs the program with the virtualenv Pulumi.yaml names
        if not venv.is_symlink():
            venv.symlink_to((REPO / ".venv").resolve())

    def pulumi(self, *args: str, show: bool = False) -> str:
        """Runs the CLI in the project copy; with show, its lines go to the user as they come (but
        the block of stack outputs, which the demo says in its own words)."""
        command = ["pulumi", *args, "--non-interactive"]
        process = subprocess.Popen(command, cwd=self.project, env=self.env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)  # fmt: skip
        lines = []
        in_outputs = False
        try:
            for row in process.stdout:
                lines.append(row)
                in_outputs = row.startswith("Outputs:") or (in_outputs and not row.startswith("Resources:"))
                if show and not in_outputs:
                    print(f"  │ {row.rstrip()}", flush=True)
            process.wait(timeout=COMMAND_TIMEOUT_S)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        output = "".join(lines)
        if process.returncode != 0:
            raise PulumiFailed(f"pulumi {' '.join(args)} failed ({process.returncode}):\n{output[-4000:]}")
        return output

    def up(self) -> None:
        self.pulumi("up", "--stack", STACK, "--yes", "--skip-preview", "--color", "never", show=True)

    def set_nodes(self, nodes: int) -> None:
        self.pulumi("config", "set", "--stack", STACK, "nodes", str(nodes))

    def outputs(self) -> dict[str, Any]:
        return json.loads(self.pulumi("stack", "output", "--stack", STACK, "--json", "--show-secrets=false"))

    def remove(self, destroy: bool) -> None:
        """The stack and every file of the demo's; with destroy, what the stack made first."""
        if self.exists():
            self.copy_program()
            if destroy:
                self.pulumi("destroy", "--stack", STACK, "--yes", "--skip-preview", "--color", "never", show=True)
            self.pulumi("stack", "rm", STACK, "--yes", *([] if destroy else ["--force"]))
        shutil.rmtree(self.home, ignore_errors=True)


class PulumiFailed(RuntimeError):
    pass
