"""One namespace's kubectl: the commands the views run, and their answers."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from typing import Any, Optional

TIMEOUT_S = 60


class KubectlError(RuntimeError):
    pass


@dataclass(frozen=True)
class Kubectl:
    namespace: str
    context: Optional[str] = None
    kubeconfig: Optional[str] = None
    timeout: float = TIMEOUT_S  # seconds for each command

    def argv(self, *args: str) -> list[str]:
        where = [*(["--kubeconfig", self.kubeconfig] if self.kubeconfig else []),
                 *(["--context", self.context] if self.context else []), "-n", self.namespace]  # fmt: skip
        return ["kubectl", *where, *args]

    def run(self, *args: str, check: bool = True, input: Optional[str] = None) -> subprocess.CompletedProcess:
        done = subprocess.run(self.argv(*args), capture_output=True, text=True, timeout=self.timeout, input=input)
        if check and done.returncode != 0:
            raise KubectlError(f"kubectl {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
        return done

    def items(self, kind: str, selector: str = "") -> list[dict[str, Any]]:
        return self.json("get", kind, *(["-l", selector] if selector else []))["items"]

    def json(self, *args: str) -> dict[str, Any]:
        return json.loads(self.run(*args, "-o", "json").stdout)

    def find(self, kind: str, name: str) -> Optional[dict[str, Any]]:
        """The object, or None when it does not exist."""
        done = self.run("get", kind, name, "--ignore-not-found", "-o", "json")
        return json.loads(done.stdout) if done.stdout.strip() else None

    def logs(self, pod: str, container: str, previous: bool = False, timestamps: bool = False) -> str:
        """The container's log ("" when there is none yet, or no previous container)."""
        flags = [*(["--previous"] if previous else []), *(["--timestamps"] if timestamps else [])]
        done = self.run("logs", pod, "-c", container, *flags, check=False)
        return done.stdout if done.returncode == 0 else ""
