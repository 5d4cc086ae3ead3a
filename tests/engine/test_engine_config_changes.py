"""What `pulumi config set` does to the deployed dev stack, as a reviewer of the preview sees it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pulumi_project import resource_type

pytestmark = pytest.mark.timeout(1800)

WORKLOAD_TYPES = {"kubernetes:apps/v1:StatefulSet", "kubernetes:batch/v1:Job"}
# The env that follows `nodes`: the world's size, and torchrun's mirror of it.
NODE_COUNT_ENV = ("NNODES", "WORLD_SIZE", "PET_NNODES")


def test_scaling_dev_to_64_nodes_updates_only_the_workload(scaled_to_64):
    changed = [(step["op"], step["urn"]) for step in scaled_to_64.preview["steps"] if step["op"] != "same"]
    assert len(changed) == 1, f"more than the workload changes: {changed}"
    ((op, urn),) = changed
    assert op == "update" and resource_type(urn) in WORKLOAD_TYPES, changed
    summary = scaled_to_64.preview["changeSummary"]
    assert {op for op, count in summary.items() if count} == {"update", "same"}, summary
    assert summary["update"] == 1


def test_scaling_updates_replicas_and_the_node_count_env(scaled_to_64):
    (workload,) = [step for step in scaled_to_64.preview["steps"] if step["op"] == "update"]
    assert not workload.get("replaceReasons"), workload.get("replaceReasons")
    changed_paths = set(workload.get("detailedDiff") or {})
    count_paths = {path for path in changed_paths if path in ("spec.replicas", "spec.parallelism", "spec.completions")}
    env_paths = {path for path in changed_paths if re.fullmatch(r"spec\.template\.spec\.containers\[\d+\]\.env.*", path)}
    assert count_paths, changed_paths
    assert env_paths, changed_paths
    assert changed_paths == count_paths | env_paths, "nothing but the pod count and the env changes"

    new_env = _container_env(workload["newState"]["inputs"])
    old_env = _container_env(workload["oldState"]["inputs"])
    nodes = scaled_to_64.dev_nodes
    assert new_env["NNODES"] == new_env["PET_NNODES"] == str(scaled_to_64.nodes)
    assert old_env["NNODES"] == str(nodes)
    procs = int(new_env["NPROC_PER_NODE"])
    assert (old_env["WORLD_SIZE"], new_env["WORLD_SIZE"]) == (str(nodes * procs), str(scaled_to_64.nodes * procs))
    unchanged = {name for name in old_env if old_env[name] == new_env.get(name)}
    assert set(new_env) - unchanged == set(NODE_COUNT_ENV), "only the node count env may change"


def test_the_human_diff_shows_the_workload_update_and_nothing_else(scaled_to_64):
    text = scaled_to_64.diff_text
    assert re.search(r"~ kubernetes:(apps/v1:StatefulSet|batch/v1:Job): \(update\)", text), text
    assert re.search(rf"~ replicas\s*: {scaled_to_64.dev_nodes} => {scaled_to_64.nodes}$", text, re.M), text
    # env values are strings: NNODES and PET_NNODES at least
    assert len(re.findall(rf'"{scaled_to_64.dev_nodes}" => "{scaled_to_64.nodes}"', text)) >= 2, text
    assert not re.search(r"\((create|replace|delete|create-replacement|delete-replaced)\)$", text, re.M), text
    assert re.search(r"^\s*~ 1 to update$", text, re.M), text


def _container_env(inputs: dict) -> dict[str, str]:
    (container,) = [c for c in inputs["spec"]["template"]["spec"]["containers"] if c["name"] == "trainer"]
    return {var["name"]: var.get("value") for var in container["env"]}


def _render_snapshot(render_dir: Path) -> dict[str, bytes]:
    return {str(path.relative_to(render_dir)): path.read_bytes() for path in render_dir.rglob("*") if path.is_file()}


def _without_timestamps(state: dict) -> dict:
    deployment = dict(state["deployment"])
    deployment["manifest"] = {k: v for k, v in deployment.get("manifest", {}).items() if k != "time"}
    deployment["resources"] = [
        {k: v for k, v in resource.items() if k not in ("created", "modified")} for resource in deployment["resources"]
    ]
    return {**state, "deployment": deployment}


def test_zero_nodes_fails_with_a_clear_message_and_changes_nothing(dev):
    project = dev.project
    state_before = _without_timestamps(project.export_state("dev"))
    render_before = _render_snapshot(project.render_dir("dev"))
    with project.config_changed("dev", nodes="0"):
        preview = project.preview_diff("dev", check=False)
        up = project.run("up", "--stack", "dev", "--yes", "--color", "never", check=False)

    for result in (preview, up):
        assert result.returncode != 0, result.describe()
        output = result.output
        assert "ddp-infra:nodes" in output, output
        assert re.search(r"ddp-infra:nodes: got '?0'?", output), output
        assert "greater than or equal to 1" in output, output
        assert "Traceback" not in output, "a config mistake is reported as a message, not a stack trace"
    assert _without_timestamps(project.export_state("dev")) == state_before
    assert _render_snapshot(project.render_dir("dev")) == render_before
