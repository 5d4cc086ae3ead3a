"""A stack ddp-infra 0.1.0 deployed upgrades in place: the real engine takes each of its resources,
then named by role alone under `ddp-infra:training:Stack`, for the world's resource named after it
(aliases, ddp_infra/components/training_world.py), and plans no create, delete or replace.

The states are what 0.1.0 left: `pulumi stack export` after its `pulumi up` of each committed stack
in render mode (prod with `kubernetes.renderDir: rendered/prod`), in tests/engine/states/0.1.0/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pulumi_project import PulumiProject, changed_ops, resource_name, resource_type

pytestmark = pytest.mark.timeout(1800)

STATES_0_1 = Path(__file__).resolve().parent / "states" / "0.1.0"
RECORDED_WITH = {"dev": {}, "prod": {"kubernetes.renderDir": "rendered/prod"}}
DATA_TYPES = ("kubernetes:core/v1:PersistentVolumeClaim", "kubernetes:core/v1:Namespace")


@pytest.mark.parametrize("stack", sorted(RECORDED_WITH))
def test_a_stack_0_1_deployed_upgrades_without_a_create_delete_or_replace_and_keeps_its_claims(tmp_path, stack):
    project = PulumiProject(tmp_path)
    project.init_stack(stack)
    for key, value in RECORDED_WITH[stack].items():
        project.config_set(stack, key, value, path=True)
    recorded = json.loads((STATES_0_1 / f"{stack}.json").read_text())
    project.run("stack", "import", "--stack", stack, "--file", str(STATES_0_1 / f"{stack}.json"))

    _, preview = project.preview_json(stack)
    summary = preview["changeSummary"]
    assert changed_ops(summary) <= {"update"}, (summary, [(s["op"], s["urn"]) for s in preview["steps"] if s["op"] != "same"])
    print(f"\n[figures] {stack} stack of 0.1.0 previewed by this version: {summary}")
    project.up(stack)

    now = project.export_state(stack)["deployment"]["resources"]
    assert not [r["urn"] for r in now if "ddp-infra:training:Stack" in r["urn"]], "every resource moved to the new layout"
    data = [r for r in recorded["deployment"]["resources"] if resource_type(r["urn"]).startswith(DATA_TYPES)]
    assert len(data) >= 3, "the recorded state holds claims and a namespace"
    for old in data:  # the same object in the cluster, under its new name, kept as it was
        (new,) = [r for r in now if resource_type(r["urn"]) == resource_type(old["urn"]) and r["id"] == old["id"]]
        assert resource_name(new["urn"]).startswith("ddp-"), new["urn"]
        assert (new.get("protect"), new.get("retainOnDelete")) == (old.get("protect"), old.get("retainOnDelete")), new["urn"]
