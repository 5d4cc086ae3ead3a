"""The CI workflow that comments previews on pull requests covers every stack, through the same
command a developer runs locally, and finds its comments by the marker the script writes."""

from __future__ import annotations

import subprocess

import yaml

from pulumi_project import REPO
from scripts import preview_diff

WORKFLOW = REPO / ".github" / "workflows" / "preview.yml"


def _workflow() -> dict:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    workflow["on"] = workflow.pop(True, workflow.get("on"))  # YAML 1.1 reads the key `on` as true
    return workflow


def _steps() -> list[dict]:
    (job,) = _workflow()["jobs"].values()
    return job["steps"]


def test_runs_on_pull_requests_with_permission_to_comment():
    workflow = _workflow()
    assert "pull_request" in workflow["on"]
    assert workflow["permissions"]["pull-requests"] == "write"


def test_previews_every_stack_of_the_repository():
    (job,) = _workflow()["jobs"].values()
    stacks_in_repo = sorted(path.name.removeprefix("Pulumi.").removesuffix(".yaml") for path in (REPO / "stacks").glob("Pulumi.*.yaml"))
    assert stacks_in_repo, "no stack files in stacks/"
    assert sorted(job["strategy"]["matrix"]["stack"]) == stacks_in_repo
    assert job["strategy"]["fail-fast"] is False, "one stack's failure must not cancel the other's comment"


def test_uses_the_make_target_and_updates_its_comment_by_the_scripts_marker():
    runs = "\n".join(step.get("run", "") for step in _steps())
    assert "make setup" in runs
    assert "make preview-diff STACK=${{ matrix.stack }}" in runs
    (comment,) = [step for step in _steps() if step.get("uses", "").startswith("actions/github-script@")]
    script = comment["with"]["script"]
    marker = preview_diff.marker("${process.env.STACK}")
    assert f"`{marker}`" in script
    assert "updateComment" in script and "createComment" in script
    assert "always()" in comment["if"], "a failed preview is commented too"


def test_the_make_target_runs_the_script_for_the_given_stack():
    dry_run = subprocess.run(
        ["make", "-n", "preview-diff", "STACK=prod"], cwd=REPO, capture_output=True, text=True, timeout=60, check=True
    )
    assert "scripts/preview_diff.py --stack prod" in dry_run.stdout
    assert "toolchain/build.sh --bin-dir" in dry_run.stdout, "the target uses the project's toolchain"
