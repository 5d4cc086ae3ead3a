"""What `pulumi config set` does to the deployed dev stack, as a reviewer of the preview sees it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pulumi_project import changed_ops, changed_steps, resource_type

pytestmark = pytest.mark.timeout(1800)

WORKLOAD_TYPES = {"kubernetes:apps/v1:StatefulSet", "kubernetes:batch/v1:Job"}
# The env that follows `nodes`: the world's size and its rendezvous id, and torchrun's mirrors of them.
NODE_COUNT_ENV = ("NNODES", "WORLD_SIZE", "PET_NNODES", "RDZV_ID", "PET_RDZV_ID")
BUDGET_TYPE = "kubernetes:policy/v1:PodDisruptionBudget"


def test_scaling_dev_to_64_nodes_replaces_the_workload_and_updates_its_budget(scaled_to_64):
    """A new size is a new world: the workload is replaced (delete first, see components/trainer.py)
    and the disruption budget's minAvailable follows nodes. Nothing else, no claim, changes."""
    changed = sorted((step["op"], resource_type(step["urn"])) for step in changed_steps(scaled_to_64.preview))
    assert changed == [("replace", "kubernetes:batch/v1:Job"), ("update", BUDGET_TYPE)], changed
    summary = scaled_to_64.preview["changeSummary"]
    assert changed_ops(summary) == {"replace", "update"}, summary
    assert summary["replace"] == summary["update"] == 1


def test_scaling_changes_the_pod_count_and_the_world_size_env(scaled_to_64):
    (workload,) = [step for step in scaled_to_64.preview["steps"] if step["op"] == "replace"]
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
    assert new_env["RDZV_ID"] == new_env["PET_RDZV_ID"] == old_env["RDZV_ID"].replace(f"-{nodes}x", f"-{scaled_to_64.nodes}x")
    unchanged = {name for name in old_env if old_env[name] == new_env.get(name)}
    assert set(new_env) - unchanged == set(NODE_COUNT_ENV), "only the world's size and its rendezvous id may change"

    (budget,) = [step for step in scaled_to_64.preview["steps"] if step["op"] == "update"]
    assert set(budget.get("detailedDiff") or {}) == {"spec.minAvailable"}, budget.get("detailedDiff")


def test_the_human_diff_shows_the_workload_replace_and_the_budget_update(scaled_to_64):
    text = scaled_to_64.diff_text
    assert re.search(r"\+-\s*kubernetes:batch/v1:Job: \(replace\)", text), text
    assert re.search(r"~ kubernetes:policy/v1:PodDisruptionBudget: \(update\)", text), text
    # env values are strings: NNODES and PET_NNODES at least
    assert len(re.findall(rf'"{scaled_to_64.dev_nodes}" => "{scaled_to_64.nodes}"', text)) >= 2, text
    assert not re.search(r"\((create|delete)\)$", text, re.M), text
    assert re.search(r"^\s*~ 1 to update$", text, re.M) and re.search(r"^\s*\+-1 to replace$", text, re.M), text


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
        assert "allowed: a number of pods from 1 to 1024, or a range MIN:MAX of them with MIN < MAX for an elastic world (e.g. 64 or 32:64)" in output, output
        assert "Traceback" not in output, "a config mistake is reported as a message, not a stack trace"
    assert _without_timestamps(project.export_state("dev")) == state_before
    assert _render_snapshot(project.render_dir("dev")) == render_before


def _changed_steps(preview: dict) -> list[dict]:
    """The steps of Kubernetes objects that are not `same` (components and the stack left out)."""
    return [step for step in changed_steps(preview) if resource_type(step["urn"]).startswith("kubernetes:")]


def test_adding_the_token_appends_env_entries_and_shifts_none(dev):
    """The provider diffs the env list by index: an entry inserted before others would show every
    later entry as changed. Adding the token adds its Secret and appends two env entries (the
    workload's spec changes, so it is replaced: see components/trainer.py)."""
    with dev.project.stack_file_restored("dev"):
        dev.project.config_set("dev", "hfToken", "hf_engine_test_token", secret=True)
        _, preview = dev.project.preview_json("dev")
    changed = _changed_steps(preview)
    assert sorted((step["op"], resource_type(step["urn"])) for step in changed) == sorted(
        [("create", "kubernetes:core/v1:Secret"), ("replace", resource_type(_workload_step(changed)["urn"]))]
    ), [(step["op"], step["urn"]) for step in changed]
    workload = _workload_step(changed)
    old_env = _env_list(workload["oldState"]["inputs"])
    diff = workload.get("detailedDiff") or {}
    env_diff = {path: d for path, d in diff.items() if ".env" in path}
    indices = {int(re.search(r"\.env\[(\d+)\]", path)[1]) for path in env_diff}
    assert indices == {len(old_env), len(old_env) + 1}, sorted(env_diff)
    # added, not changed (the entries force the workload's replacement, as any spec change does)
    assert {d["kind"] for d in env_diff.values()} == {"add-replace"}, env_diff


def test_growing_a_claim_is_an_in_place_update(dev):
    """What the README says of a claim's size, as pulumi-kubernetes 4.x plans it."""
    with dev.project.stack_file_restored("dev"):
        dev.project.config_set("dev", "storage.outputs.size", "50Gi", path=True)
        _, preview = dev.project.preview_json("dev")
    changed = _changed_steps(preview)
    assert [(step["op"], resource_type(step["urn"])) for step in changed] == [
        ("update", "kubernetes:core/v1:PersistentVolumeClaim")
    ], [(step["op"], step["urn"]) for step in changed]
    (claim,) = changed
    assert not claim.get("replaceReasons"), claim
    assert set(claim["detailedDiff"]) == {"spec.resources.requests.storage"}, claim["detailedDiff"]


def test_a_node_count_that_is_not_a_number_is_refused_with_the_allowed_range(dev):
    with dev.project.stack_file_restored("dev"):
        result = dev.project.run("config", "set", "--stack", "dev", "nodes", "abc", check=False)
        if result.returncode == 0:  # accepted by the CLI: then the preview must refuse it
            result = dev.project.preview_diff("dev", check=False)
    assert result.returncode != 0, result.describe()
    assert "nodes" in result.output and "abc" in result.output, result.output
    assert "a number of pods from 1 to 1024, or a range MIN:MAX of them with MIN < MAX for an elastic world (e.g. 64 or 32:64)" in result.output, result.output
    assert "Traceback" not in result.output


def test_an_unknown_key_is_refused_with_every_allowed_key(dev):
    from ddp_infra.config import StackConfig

    with dev.project.config_changed("dev", node="4"):
        result = dev.project.preview_diff("dev", check=False)
    assert result.returncode != 0, result.describe()
    (line,) = [line for line in result.output.splitlines() if "ddp-infra:node:" in line]
    for field in StackConfig.model_fields.values():
        assert re.search(rf"\b{field.alias}\b", line), f"{field.alias} missing from: {line}"


def _workload_step(steps: list[dict]) -> dict:
    (workload,) = [step for step in steps if resource_type(step["urn"]) in WORKLOAD_TYPES]
    return workload


def _env_list(inputs: dict) -> list[dict]:
    (container,) = [c for c in inputs["spec"]["template"]["spec"]["containers"] if c["name"] == "trainer"]
    return container["env"]


def test_a_claim_class_change_is_refused_by_preview_and_up_and_changes_nothing(dev):
    """The deployed dev stack recorded its claims; a storage class change, which the provider would
    turn into a replace of a retained claim, stops preview and up alike, with the key and what to do."""
    project, before = dev.project, dev.project.export_state("dev")
    claim_file = sorted(project.render_dir("dev").rglob("*persistentvolumeclaim*outputs-pvc*"))
    assert claim_file, "the dev stack renders its outputs claim"
    rendered = claim_file[0].read_text()
    with project.stack_file_restored("dev"):
        project.config_set("dev", "ddp-infra:storage.outputs.storageClass", "fast", path=True)
        for result in (project.preview_diff("dev", check=False), project.run("up", "--stack", "dev", "--yes", check=False)):
            assert result.returncode != 0, result.describe()
            assert "ddp-infra:storage.outputs.storageClass: (not set: the cluster's default class) -> 'fast'" in result.output, result.describe()
            assert "nothing was changed" in result.output and "Traceback" not in result.output, result.describe()
    after = project.export_state("dev")
    assert _resources(after) == _resources(before), "a refused up changes no resource in the state"
    assert claim_file[0].read_text() == rendered
    recorded = json.loads(project.stack_outputs("dev").stdout)["claims"]["outputs"]
    assert recorded["storageClass"] is None, "the refused up kept the record the next run compares with"
    summary = project.preview_json("dev")[1]["changeSummary"]
    assert not changed_ops(summary), summary


def _resources(state: dict) -> list:
    return sorted((r["urn"], json.dumps(r.get("inputs"), sort_keys=True)) for r in state["deployment"]["resources"])
