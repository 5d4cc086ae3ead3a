"""The GitHub workflows: actionlint finds nothing, and the preview workflow keeps to its rules.

The rules, read from the parsed YAML: pull-request code never runs where a credential can reach
it without a reviewer (secrets only in jobs bound to a `preview-<stack>` environment, whose
token can only read; the job that may write to the pull request checks out and runs nothing); no
workflow creates a stack; the stack matrix is whatever `stacks/` holds; every pull request runs
the README's test command.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from pulumi_project import REPO, require_tool, toolchain_path
from scripts import preview_diff

WORKFLOWS = REPO / ".github" / "workflows"
PREVIEW = WORKFLOWS / "preview.yml"
TEST = WORKFLOWS / "test.yml"
SECRET_REFERENCE = re.compile(r"secrets\s*(?:\.\s*([A-Za-z_][A-Za-z0-9_]*)|\[)")
EXPRESSION = re.compile(r"\$\{\{(.*?)\}\}", re.S)


def workflow(path: Path) -> dict[str, Any]:
    document = yaml.safe_load(path.read_text())
    document["on"] = document.pop(True, document.get("on"))  # YAML 1.1 reads the key `on` as true
    return document


def secrets_of(node: Any) -> set[str]:
    """The secrets a job (or any part of a workflow) names; the run's own GITHUB_TOKEN aside."""
    names = {match[1] or "<computed>" for match in SECRET_REFERENCE.finditer(json.dumps(node))}
    return names - {"GITHUB_TOKEN"}


def writes(job: dict[str, Any]) -> set[str]:
    permissions = job.get("permissions") or {}
    return {scope for scope, level in permissions.items() if level == "write"}


def run_scripts(document: dict[str, Any]) -> list[str]:
    return [step["run"] for job in document["jobs"].values() for step in job.get("steps", []) if "run" in step]


def test_actionlint_finds_nothing_in_the_workflows():
    actionlint = require_tool("actionlint", toolchain_path())
    files = sorted(str(path) for path in WORKFLOWS.glob("*.yml"))
    assert files
    done = subprocess.run(
        [actionlint, "-no-color", "-shellcheck=", "-pyflakes=", *files], cwd=REPO, capture_output=True, text=True, timeout=120
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_does_check(tmp_path):
    """The same call on a workflow with a matrix key that does not exist reports it."""
    actionlint = require_tool("actionlint", toolchain_path())
    broken = tmp_path / ".github" / "workflows" / "broken.yml"
    broken.parent.mkdir(parents=True)
    broken.write_text(PREVIEW.read_text().replace("matrix.stack }}", "matrix.stacks }}", 1))
    done = subprocess.run([actionlint, "-no-color", "-shellcheck=", "-pyflakes=", str(broken)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 1 and "stacks" in done.stdout, done.stdout + done.stderr


def test_previews_run_on_pull_requests_only_and_read_by_default():
    document = workflow(PREVIEW)
    # pull_request_target or workflow_run would run with the base repository's secrets and write token
    assert set(document["on"]) == {"pull_request"}
    assert document["permissions"] == {"contents": "read"}


def test_only_jobs_bound_to_a_stacks_environment_see_secrets_and_they_cannot_write():
    jobs = workflow(PREVIEW)["jobs"]
    with_secrets = {name for name, job in jobs.items() if secrets_of(job)}
    assert with_secrets == {"preview"}
    assert secrets_of(jobs["preview"]) == {"PULUMI_BACKEND_URL", "PULUMI_ACCESS_TOKEN", "PULUMI_CONFIG_PASSPHRASE", "KUBECONFIG"}
    for name in with_secrets:
        job = jobs[name]
        assert job["environment"] == "preview-${{ matrix.stack }}", f"{name} reads secrets outside an environment"
        assert not writes(job), f"{name} runs pull-request code with secrets and a write token"
        assert set(job["permissions"]) == {"contents"}
        # secrets reach only the steps that need them, never the whole job (setup runs without them)
        assert not secrets_of(job.get("env", {}))
        setup = next(step for step in job["steps"] if step.get("name") == "Setup")
        assert not secrets_of(setup)


def test_the_job_that_writes_to_the_pull_request_runs_nothing_from_it():
    jobs = workflow(PREVIEW)["jobs"]
    writers = {name: job for name, job in jobs.items() if writes(job)}
    assert set(writers) == {"comment"}
    comment = writers["comment"]
    assert writes(comment) == {"pull-requests", "issues"}
    assert not secrets_of(comment) and "environment" not in comment
    uses = [step.get("uses", "") for step in comment["steps"]]
    assert all(step.get("uses") for step in comment["steps"]), "no shell step"
    assert not any(use.startswith("actions/checkout") for use in uses)
    assert {use.split("@")[0] for use in uses} == {"actions/download-artifact", "actions/github-script"}


def test_no_workflow_creates_a_stack():
    for path in WORKFLOWS.glob("*.yml"):
        for script in run_scripts(workflow(path)):
            assert "--create" not in script and "stack init" not in script and "stack select" not in script, path.name


def test_no_expression_is_pasted_into_a_shell_script():
    """A stack name comes from a file name in the pull request: scripts read it from env instead."""
    for path in WORKFLOWS.glob("*.yml"):
        for script in run_scripts(workflow(path)):
            assert not EXPRESSION.search(script), f"{path.name}: {script[:60]}"


def list_stacks(directory: Path, tmp_path: Path) -> tuple[int, Any]:
    """The matrix job's listing step, run in `directory` as the runner runs it."""
    (step,) = [step for step in workflow(PREVIEW)["jobs"]["stacks"]["steps"] if step.get("id") == "list"]
    output = tmp_path / "github_output"
    output.write_text("")
    done = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=directory, env={"GITHUB_OUTPUT": str(output), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    lines = dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
    return done.returncode, json.loads(lines["stacks"]) if "stacks" in lines else done.stdout + done.stderr


def stack_files(root: Path) -> list[str]:
    return sorted(path.name.removeprefix("Pulumi.").removesuffix(".yaml") for path in (root / "stacks").glob("Pulumi.*.yaml"))


def test_the_matrix_is_every_stack_file(tmp_path):
    preview = workflow(PREVIEW)["jobs"]["preview"]
    assert preview["strategy"]["matrix"]["stack"] == "${{ fromJSON(needs.stacks.outputs.stacks) }}"
    assert preview["strategy"]["fail-fast"] is False, "one stack's failure must not cancel the other's comment"
    assert workflow(PREVIEW)["jobs"]["stacks"]["outputs"]["stacks"] == "${{ steps.list.outputs.stacks }}"

    status, stacks = list_stacks(REPO, tmp_path)
    assert status == 0 and sorted(stacks) == stack_files(REPO) and {"dev", "prod"} <= set(stacks)

    copy = tmp_path / "repo"
    shutil.copytree(REPO / "stacks", copy / "stacks")
    (copy / "stacks" / "Pulumi.staging.yaml").write_text("config: {}\n")
    status, stacks = list_stacks(copy, tmp_path)
    assert status == 0 and sorted(stacks) == stack_files(copy) and "staging" in stacks


def test_a_stack_file_named_to_inject_is_refused(tmp_path):
    copy = tmp_path / "repo"
    (copy / "stacks").mkdir(parents=True)
    (copy / "stacks" / 'Pulumi.x",{"a.yaml').write_text("config: {}\n")
    status, shown = list_stacks(copy, tmp_path)
    assert status != 0 and "a stack name is" in shown


def test_the_comment_is_found_by_the_scripts_marker():
    (step,) = [step for step in workflow(PREVIEW)["jobs"]["comment"]["steps"] if "github-script" in step.get("uses", "")]
    script = step["with"]["script"]
    assert f"`{preview_diff.marker('${stack}')}`" in script
    assert "updateComment" in script and "createComment" in script
    assert "always()" in workflow(PREVIEW)["jobs"]["comment"]["if"], "a failed preview is commented too"
    runs = "\n".join(run_scripts(workflow(PREVIEW)))
    assert 'make preview-diff STACK="$STACK"' in runs


def readme_test_commands() -> list[str]:
    """The commands of the README's "Setup and tests" block."""
    section = (REPO / "README.md").read_text().split("## Setup and tests", 1)[1]
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.strip().splitlines()]


def test_every_pull_request_runs_the_readmes_test_command():
    document = workflow(TEST)
    assert "pull_request" in document["on"]
    assert document["permissions"] == {"contents": "read"}
    assert not secrets_of(document)
    commands = readme_test_commands()
    assert commands == ["make setup", "make test"]
    (job,) = document["jobs"].values()
    runs = [step["run"] for step in job["steps"] if "run" in step]
    ran = [command for script in runs for command in commands if script.rstrip().endswith(command)]
    assert ran == commands, runs


def test_the_make_target_runs_the_script_for_the_given_stack():
    dry_run = subprocess.run(
        ["make", "-n", "preview-diff", "STACK=prod"], cwd=REPO, capture_output=True, text=True, timeout=60, check=True
    )
    assert "scripts/preview_diff.py --stack prod" in dry_run.stdout
    assert "toolchain/build.sh --bin-dir" in dry_run.stdout, "the target uses the project's toolchain"
