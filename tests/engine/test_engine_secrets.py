"""An HF token set with `pulumi config set --secret`, and a secret env value set with
`pulumi config set --secret --path 'secretEnv.NAME'`, stay out of everything a person or CI reads:
preview and up output, the PR comment markdown, stack outputs and the state. The one place each
may appear is the render directory, where the provider writes its Secret (base64, not plain)."""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from pulumi_project import REPO, PulumiProject

pytestmark = pytest.mark.timeout(1800)

HF_TOKEN_KEY = "hfToken"
SECRET_ENV_NAME = "MLFLOW_TRACKING_TOKEN"


@dataclass
class SecretRun:
    project: PulumiProject
    token: str
    env_value: str  # of secretEnv.MLFLOW_TRACKING_TOKEN
    outputs: dict[str, str]  # what each command printed, by a name for the failure message

    @property
    def secrets(self) -> dict[str, str]:
        """Each secret by the name a failure message gives it."""
        return {"the token": self.token, f"secretEnv.{SECRET_ENV_NAME}": self.env_value}


@pytest.fixture(scope="module")
def secret_run(tmp_path_factory) -> SecretRun:
    """A dev stack of its own (so the secrets never reach the shared one), previewed and brought up."""
    project = PulumiProject(tmp_path_factory.mktemp("secret"))
    project.init_stack("dev")
    token = f"hf_{secrets.token_hex(16)}"
    project.config_set("dev", HF_TOKEN_KEY, token, secret=True)
    env_value = f"mlflow-{secrets.token_hex(16)}"
    project.config_set("dev", f"secretEnv.{SECRET_ENV_NAME}", env_value, secret=True, path=True)
    outputs = {
        "pulumi preview --diff": project.preview_diff("dev").output,
        "pulumi preview --json": project.preview_json("dev")[0].output,
    }
    # The PR comment of the preview that creates the Secret, as CI would post it.
    comment = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "preview_diff.py"), "--stack", "dev", "--cwd", str(project.dir)],
        env=project.env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert comment.returncode == 0, comment.stdout + comment.stderr
    outputs["scripts/preview_diff.py"] = comment.stdout + comment.stderr
    outputs["pulumi up --diff"] = project.run("up", "--stack", "dev", "--yes", "--diff", "--color", "never").output
    outputs["pulumi stack output --json"] = project.stack_outputs("dev").output
    outputs["pulumi stack export"] = project.run("stack", "export", "--stack", "dev").output
    return SecretRun(project, token, env_value, outputs)


def test_the_token_is_stored_encrypted_in_the_stack_file(secret_run):
    entry = secret_run.project.stack_config("dev")[f"ddp-infra:{HF_TOKEN_KEY}"]
    assert isinstance(entry, dict) and "secure" in entry, entry


def test_a_secret_env_value_is_stored_as_an_encrypted_leaf_of_the_object(secret_run):
    entry = secret_run.project.stack_config("dev")["ddp-infra:secretEnv"]
    assert list(entry) == [SECRET_ENV_NAME] and list(entry[SECRET_ENV_NAME]) == ["secure"], entry


def test_the_secrets_never_appear_in_what_the_cli_prints(secret_run):
    for command in ("pulumi preview --diff", "pulumi up --diff", "pulumi preview --json"):
        assert "[secret]" in secret_run.outputs[command], f"`{command}` does not show the Secret's data masked"
    for command, output in secret_run.outputs.items():
        assert output.strip(), f"{command} printed nothing"
        for what, value in secret_run.secrets.items():
            assert value not in output, f"{what} is in plain text in the output of `{command}`"


def _forms(token: str) -> list[bytes]:
    """The token as written, and as a Secret's `data` and a state file's JSON hold it (base64)."""
    return [token.encode(), base64.b64encode(token.encode())]


def _holds(path: Path, token: str) -> bool:
    content = path.read_bytes()
    return any(form in content for form in _forms(token))


def test_the_secrets_never_appear_in_the_state_backend(secret_run):
    """Neither in plain text nor base64: the state holds the Secrets' inputs and outputs encrypted."""
    files = [path for path in secret_run.project.backend.rglob("*") if path.is_file()]
    assert any(path.suffix == ".json" for path in files), "no state file was written"
    for what, value in secret_run.secrets.items():
        leaks = [str(path) for path in files if _holds(path, value)]
        assert not leaks, f"{what} is in {leaks}"
    state = json.loads(secret_run.outputs["pulumi stack export"])
    stored = [r for r in state["deployment"]["resources"] if r["type"] == "kubernetes:core/v1:Secret"]
    assert sorted(r["outputs"]["metadata"]["name"] for r in stored) == ["trainer-env", "trainer-hf-token"]
    for secret in stored:
        assert "ciphertext" in json.dumps(secret["outputs"]["data"]), "a Secret's data is not encrypted in the state"


def test_the_secrets_reach_the_cluster_only_through_the_render_dir(secret_run):
    """Each rendered Secret carries its value (base64 in `data`, as Kubernetes stores it), so
    `kubectl apply -f` of the directory gives pods the value; no other file the run wrote holds it."""
    project = secret_run.project
    render_dir = project.render_dir("dev")
    for what, value in secret_run.secrets.items():
        holding = {path for path in _files(project.root) if _holds(path, value)}
        assert holding, f"the rendered manifests lack {what}: pods would run without it"
        assert all(render_dir in path.parents for path in holding), sorted(map(str, holding))
        (secret_file,) = holding
        assert value.encode() not in secret_file.read_bytes(), "the README says data is base64, not plain"
        (secret,) = [doc for doc in yaml.safe_load_all(secret_file.read_text()) if doc]
        assert secret["kind"] == "Secret"
        assert [base64.b64decode(encoded).decode() for encoded in secret["data"].values()] == [value]


def test_the_rendered_pods_read_the_secret_env_from_its_secret(secret_run):
    render_dir = secret_run.project.render_dir("dev")
    documents = [doc for path in render_dir.rglob("*.yaml") for doc in yaml.safe_load_all(path.read_text()) if doc]
    (workload,) = [doc for doc in documents if doc["kind"] in ("Job", "StatefulSet")]
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    (var,) = [var for var in container["env"] if var["name"] == SECRET_ENV_NAME]
    assert var["valueFrom"]["secretKeyRef"] == {"name": "trainer-env", "key": SECRET_ENV_NAME}


def _files(root: Path) -> list[Path]:
    """Every file under root, not following the link to the shared virtualenv."""
    return [Path(parent) / name for parent, _, names in os.walk(root) for name in names if not (Path(parent) / name).is_symlink()]
