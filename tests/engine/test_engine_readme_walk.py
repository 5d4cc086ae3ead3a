"""The README's "Using it" section, run as a new user runs it: every command line of its bash
blocks, in the README's order, in a fresh copy of the project (a git repository of its own),
with its own HOME, its own local file backend and a real, empty API server for `kubectl apply`.

A command the README shows there is either run here or removed from the README: the walk reads
the lines from the README itself, so an untested line cannot be added.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from new_user import fresh_clone, git, user_environment
from pulumi_project import (
    COMMAND_TIMEOUT_S, REPO, Result, file_backend_url, installed_plugins, provider_versions, require_tool, toolchain_path,
    user_database_home,
)  # fmt: skip
from toolchain.apiserver import LocalApiServer

pytestmark = pytest.mark.timeout(3600)

README = REPO / "README.md"
SECTION = "## Using it"
# The journey every user takes, each a prefix of at least one README command.
ACTIVATE = ". toolchain/activate"
JOURNEY = (
    ACTIVATE,
    "mkdir -p ~/",
    'pulumi login "file://',
    "export PULUMI_CONFIG_PASSPHRASE=",
    "pulumi stack init dev",
    "pulumi config set -s dev --path",
    "pulumi config set -s dev --secret hfToken",
    "pulumi preview -s dev",
    "pulumi up -s dev",
    "kubectl apply -R -f rendered/dev",
    "pulumi config set -s dev nodes 64",
    "pulumi preview -s dev --diff",
    "pulumi stack output",
    "pulumi destroy -s dev",
)


def readme_commands() -> list[str]:
    """The command lines of the section's bash blocks, comments dropped, in order."""
    text = README.read_text()
    start = text.index(f"\n{SECTION}\n")
    section = text[start : text.index("\n## ", start + 1)]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    lines = [line.strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


@dataclass
class Walk:
    copy: Path
    steps: list[tuple[str, Result]]  # (README line, what running it did)

    def after(self, prefix: str, nth: int = 0) -> Result:
        return [result for line, result in self.steps if line.startswith(prefix)][nth]


def run_line(line: str, copy: Path, env: dict[str, str]) -> Result:
    if line.startswith("export "):  # carried to the next lines, as the shell would
        for assignment in shlex.split(line[len("export ") :], comments=True):
            name, _, value = assignment.partition("=")
            env[name] = value
        return Result([line], 0, "", "")
    if line.startswith(". "):  # sourced: what it exports is carried to the next lines
        script = f"exec 3>&1 1>&2\n{line}\n[ $? = 0 ] || exit 1\nenv -0 >&3"  # the line's own output, then the env
        done = subprocess.run(["bash", "-c", script], cwd=copy, env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
        if done.returncode == 0:
            env.clear()
            env.update(entry.split("=", 1) for entry in done.stdout.split("\0") if "=" in entry)
        return Result([line], done.returncode, "", done.stderr)
    done = subprocess.run(
        ["bash", "-c", line], cwd=copy, env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S
    )
    return Result([line], done.returncode, done.stdout, done.stderr)


@pytest.fixture(scope="module")
def walk(tmp_path_factory) -> Walk:
    root = tmp_path_factory.mktemp("walk")
    copy = fresh_clone(root)
    require_tool("kubectl", toolchain_path())
    for binary in ("etcd", "kube-apiserver"):
        require_tool(binary, toolchain_path())
    steps = []
    with LocalApiServer() as api:
        env = user_environment(root / "home", api.kubeconfig)
        for line in readme_commands():
            result = run_line(line, copy, env)
            steps.append((line, result))
            assert result.returncode == 0, f"README line failed:\n{result.describe()}"
    return Walk(copy, steps)


def test_the_readme_shows_the_whole_journey():
    commands = readme_commands()
    missing = [step for step in JOURNEY if not any(line.startswith(step) for line in commands)]
    assert not missing, f"the README's walk lacks: {missing}"
    order = [next(i for i, line in enumerate(commands) if line.startswith(step)) for step in JOURNEY]
    assert order == sorted(order), "the README's walk is out of order"


def test_every_readme_command_runs(walk):
    assert [line for line, _ in walk.steps] == readme_commands()


def test_the_first_preview_plans_creates_and_the_first_up_renders(walk):
    assert re.search(r"\+\s*\d+ to create", walk.after("pulumi preview -s dev").output)
    assert re.search(r"\+\s*\d+ created", walk.after("pulumi up -s dev").output)
    applied = walk.after("kubectl apply -R -f rendered/dev").stdout
    assert re.search(r"^namespace/\S+ created$", applied, re.M) and "job.batch/" in applied, applied


def test_scaling_replaces_the_job_and_the_second_up_renders_64_pods(walk):
    diff = walk.after("pulumi preview -s dev --diff").output
    # the Job replaced (a new world), its disruption budget updated, nothing else
    assert re.search(r"\+-1 to replace", diff) and re.search(r"~ 1 to update", diff), diff
    assert re.search(r"~ completions\s*: 2 => 64", diff), diff
    assert "to create" not in diff and "to delete" not in diff, diff
    up = walk.after("pulumi up -s dev", 1)
    assert re.search(r"\+-1 replaced", up.output) and re.search(r"~ 1 updated", up.output), up.output


def test_the_secret_set_in_the_walk_never_shows(walk):
    token = next(
        shlex.split(line, comments=True)[-1] for line, _ in walk.steps if line.startswith("pulumi config set -s dev --secret")
    )
    for line, result in walk.steps:
        assert token not in result.output, f"`{line}` prints the token"
    stack_file = yaml.safe_load((walk.copy / "stacks" / "Pulumi.dev.yaml").read_text())
    assert "secure" in stack_file["config"]["ddp-infra:hfToken"]


def test_the_stack_outputs_are_commands_to_paste(walk):
    assert walk.after("pulumi stack output kubectlWatchPods").stdout.startswith("kubectl -n ")
    assert " logs -f " in walk.after("pulumi stack output kubectlFollowRank0").stdout


def test_destroy_leaves_no_resource_in_the_state_and_keeps_the_claims(walk):
    """What the README's destroy line says: in render mode the kept objects keep their files."""
    assert re.search(r"- \d+ deleted", walk.after("pulumi destroy -s dev").output)
    env = user_environment(walk.copy.parent.parent / "home-after", "")
    assert run_line(ACTIVATE, walk.copy, env).returncode == 0
    env["PULUMI_CONFIG_PASSPHRASE"] = "unused"
    env["PULUMI_BACKEND_URL"] = file_backend_url(walk.copy.parent.parent / "home" / ".pulumi-state")
    exported = subprocess.run(
        ["pulumi", "stack", "export", "--stack", "dev"], cwd=walk.copy, env=env, capture_output=True, text=True,
        timeout=COMMAND_TIMEOUT_S,
    )  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    assert not yaml.safe_load(exported.stdout)["deployment"].get("resources")
    kinds = {doc["kind"] for path in (walk.copy / "rendered" / "dev").rglob("*.yaml") for doc in yaml.safe_load_all(path.read_text()) if doc}
    assert kinds == {"Namespace", "PersistentVolumeClaim"}, kinds


def test_the_walk_changes_only_the_stack_file_it_configures(walk):
    """rendered/ is ignored; the one tracked file that changes is the stack's own."""
    assert git(walk.copy, "status", "--porcelain").splitlines() == [" M stacks/Pulumi.dev.yaml"]


def test_stack_init_on_a_fresh_clone_adds_only_the_salt_the_readme_speaks_of(tmp_path):
    copy = fresh_clone(tmp_path)
    env = user_environment(tmp_path / "home", str(tmp_path / "no-kubeconfig"))
    assert run_line(ACTIVATE, copy, env).returncode == 0
    env.update(PULUMI_BACKEND_URL=file_backend_url(tmp_path / "state"), PULUMI_CONFIG_PASSPHRASE="fresh-clone")
    (tmp_path / "state").mkdir()
    init = run_line("pulumi stack init dev --secrets-provider passphrase", copy, env)
    assert init.returncode == 0, init.describe()
    assert git(copy, "status", "--porcelain").splitlines() == [" M stacks/Pulumi.dev.yaml"]
    diff = [line for line in git(copy, "diff", "-U0").splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert len(diff) == 1 and diff[0].startswith("+encryptionsalt: "), diff
    readme = " ".join(README.read_text().split())
    assert "`pulumi stack init` changes one tracked file: it adds an `encryptionsalt:` line to `stacks/Pulumi.dev.yaml`" in readme


def test_the_walks_login_stays_in_its_own_home(walk):
    """`pulumi login` wrote the walk's backend into the walk's CLI home, not this machine's."""
    home = walk.copy.parent.parent / "home"
    credentials = json.loads((home / ".pulumi" / "credentials.json").read_text())
    assert credentials["current"] == file_backend_url(home / ".pulumi-state"), credentials


def test_the_cli_takes_its_home_from_the_user_database_not_from_HOME(tmp_path):
    """Without PULUMI_HOME, the CLI run with another $HOME sees the same plugins and writes nothing
    there: why the walk sets PULUMI_HOME to move the CLI's home with the user's."""

    def plugins(home: Path) -> list[dict]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_")}
        env.update(HOME=str(home), PATH=toolchain_path(), PULUMI_SKIP_UPDATE_CHECK="true")
        # lastUsedTime left out: the suite's other engines use the same plugins between the two listings
        return [{k: v for k, v in plugin.items() if k != "lastUsedTime"} for plugin in installed_plugins("pulumi", env)]

    in_user_home = plugins(user_database_home())
    assert provider_versions(in_user_home), in_user_home
    assert plugins(tmp_path) == in_user_home
    assert not (tmp_path / ".pulumi").exists()
