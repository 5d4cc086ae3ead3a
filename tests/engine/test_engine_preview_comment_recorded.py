"""The pull-request comment of scripts/preview_diff.py, made from `pulumi preview --json`
documents of this program (tests/engine/previews/, recorded by the real engine from the scenarios
of preview_recordings.py, which test_engine_previews.py holds them to), and its limits on
made-up previews. No engine needed."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from pathlib import Path

import pytest

from preview_recordings import NEW_TOKEN, OLD_TOKEN
from pulumi_project import changed_steps

from ddp_infra import gang
from ddp_infra.names import SECRETS_DIGEST_ANNOTATION
from scripts import preview_diff

PREVIEWS = Path(__file__).parent / "previews"


def recorded(name: str) -> dict:
    return json.loads((PREVIEWS / f"{name}.json").read_text())


def comment(document: dict, stack: str = "prod", status: int = 0) -> tuple[preview_diff.Preview, str]:
    preview = preview_diff.parse_preview(stack, status, json.dumps(document))
    return preview, preview_diff.render_markdown(preview)


def caution(markdown: str) -> str:
    """The warning above the diff ('' when there is none)."""
    head = markdown.split("```", 1)[0]
    return head[head.index("> [!CAUTION]"):] if "> [!CAUTION]" in head else ""


def test_scaling_replaces_the_job_and_updates_its_budget_with_the_values_that_change():
    preview, markdown = comment(recorded("dev-nodes-2-to-64"), "dev")
    assert markdown.startswith("<!-- ddp-infra-preview:dev -->\n")
    assert preview.changes == {"update": 1, "replace": 1, "same": 19, "read": 1}
    # the read of the stack's last outputs (ddp_infra.claim_changes) changes nothing: not counted
    assert "**create 0 · update 1 · replace 1 · delete 0 · same 19**" in markdown
    assert preview.destroyed == [preview_diff.Destroyed("replace", "kubernetes:batch/v1:Job ddp-trainer", False, False, False)]
    assert "> - `kubernetes:batch/v1:Job ddp-trainer`: replace" in caution(markdown) and "hold data" not in caution(markdown)
    assert re.search(r"^- \+-kubernetes:batch/v1:Job ddp-trainer: \(replace\)$", markdown, re.M), markdown
    assert re.search(r"^!\s+~ spec\.completions: 2 => 64 \(forces replacement\)$", markdown, re.M), markdown
    assert re.search(r"^!\s+~ spec\.parallelism: 2 => 64 \(forces replacement\)$", markdown, re.M), markdown
    for name in ("NNODES", "WORLD_SIZE", "PET_NNODES"):
        assert re.search(rf'^!\s+~ spec\.template\.spec\.containers\[0\]\.env\[\d+\]\.value \({name}\): "2" => "64" \(forces replacement\)$', markdown, re.M), name
    assert re.search(r"^! ~ kubernetes:policy/v1:PodDisruptionBudget ddp-guardrails-pdb: \(update\)$", markdown, re.M), markdown
    assert re.search(r"^!\s+~ spec\.minAvailable: 1 => 63$", markdown, re.M), markdown
    assert "pulumi:pulumi:Stack" not in markdown, "the unchanged root stack is not listed"
    # what the scheduler will do with the world of the change, said by the program at preview (ddp_infra.gang.admission)
    said = "a world of 64: its pods are scheduled one by one; it trains once 64 of them run; a lost pod: the world waits"
    assert preview.admissions and preview.admissions[0].startswith(preview_diff.ADMISSION_PREFIX + said), preview.admissions
    assert markdown.split("```", 1)[0].count(f"**Admission**: {said}") == 1, markdown
    assert preview_diff.ADMISSION_PREFIX == gang.ADMISSION_PREFIX
    assert "StackReference" not in markdown, "nor the read of the stack's last outputs"


def test_a_claim_replaced_while_its_protection_is_removed_is_warned_about():
    """What the text parser missed: the replace of a claim whose `protect` goes in the same change."""
    document = recorded("prod-outputs-claim-replaced-while-unprotected")
    (step,) = changed_steps(document)
    assert (step["oldState"].get("protect", False), step["newState"].get("protect", False)) == (True, False)
    preview, markdown = comment(document)
    assert preview.destroyed == [preview_diff.Destroyed(
        "replace", "kubernetes:core/v1:PersistentVolumeClaim ddp-storage-outputs", protected=True, unprotected_now=True, retained=True)]
    warning = caution(markdown)
    assert "hold data (PersistentVolumeClaim or Namespace)" in warning
    assert "> - `kubernetes:core/v1:PersistentVolumeClaim ddp-storage-outputs`: replace (protected until now: this change removes `protect`)" in warning
    assert "\n- +-kubernetes:core/v1:PersistentVolumeClaim ddp-storage-outputs: (replace) [protect removed]\n" in markdown
    assert '~ spec.storageClassName: "shared-rwx" => "fast-rwx" (forces replacement)' in markdown


def test_a_deleted_namespace_is_warned_about_and_a_rotated_secret_stays_masked():
    document = recorded("dev-namespace-deleted-token-rotated")
    preview, markdown = comment(document, "dev")
    # the namespace's component goes with it, but a component holds nothing: only objects are listed
    assert [(d.op, d.resource, d.retained) for d in preview.destroyed] == [
        ("replace", "kubernetes:core/v1:Secret ddp-hf-token", False), ("replace", "kubernetes:batch/v1:Job ddp-trainer", False),
        ("delete", "kubernetes:core/v1:Namespace ddp-namespace", True)]
    assert "> - `kubernetes:core/v1:Namespace ddp-namespace`: delete (retainOnDelete" in caution(markdown)
    assert '~ data.token: "[secret]" => "[secret]" (forces replacement)' in markdown
    # the pods read the token when they start: its digest on their template replaces the world, masked too
    assert "> - `kubernetes:batch/v1:Job ddp-trainer`: replace" in caution(markdown)
    assert f'~ spec.template.metadata.annotations["{SECRETS_DIGEST_ANNOTATION}"]: "[secret]" => "[secret]" (forces replacement)' in markdown
    for token in (OLD_TOKEN, NEW_TOKEN):
        digest = hashlib.sha256(json.dumps({"hfToken": token}).encode()).hexdigest()
        assert token not in json.dumps(document) + markdown and digest not in json.dumps(document) + markdown


@pytest.mark.parametrize("op", sorted(preview_diff.DESTRUCTIVE_OPS))
@pytest.mark.parametrize("kind, name", [("kubernetes:core/v1:PersistentVolumeClaim", "ddp-storage-outputs"), ("kubernetes:core/v1:Namespace", "ddp-namespace")])
@pytest.mark.parametrize("protect", [False, True])
def test_every_replace_or_delete_of_a_claim_or_namespace_is_warned_about(op, kind, name, protect):
    document = copy.deepcopy(recorded("prod-outputs-claim-replaced-while-unprotected"))
    step = changed_steps(document)[0]
    step["op"] = op
    step["urn"] = re.sub(r"kubernetes:core/v1:PersistentVolumeClaim::ddp-storage-outputs$", f"{kind}::{name}", step["urn"])
    for state in ("oldState", "newState"):
        step[state]["protect"] = protect
    preview, markdown = comment(document)
    warning = caution(markdown)
    assert f"> - `{kind} {name}`: {preview_diff.DESTRUCTIVE_OPS[op]}" in warning
    assert "1 of them hold data" in warning
    assert ("protected: the update will fail" in warning) == protect


def test_removing_a_claims_protection_is_shown_even_without_a_change_to_it():
    document = copy.deepcopy(recorded("prod-outputs-claim-replaced-while-unprotected"))
    (step,) = changed_steps(document)
    step.update(op="same", detailedDiff=None)
    step.pop("replaceReasons", None), step.pop("diffReasons", None)
    preview, markdown = comment(document)
    assert preview.destroyed == []
    assert "kubernetes:core/v1:PersistentVolumeClaim ddp-storage-outputs: (same) [protect removed]" in markdown


def test_a_failed_preview_leads_with_its_error():
    preview, markdown = comment(recorded("dev-nodes-0"), "dev", status=255)
    assert preview.errors == [
        "error: invalid stack configuration (1 problem(s)); nothing was created:\n"
        "  ddp-infra:nodes: got '0'; allowed: a number of pods from 1 to 1024, or a range MIN:MAX of them with MIN < MAX for an elastic world (e.g. 64 or 32:64)",
        "error: an unhandled error occurred: program exited with non-zero exit code: 1",
    ]
    head, _, rest = markdown.partition("<details>")
    assert "The preview failed (exit status 255)" in head and "ddp-infra:nodes: got '0'" in head
    assert rest.rstrip().endswith("</details>")


def test_output_that_is_not_json_fails_the_comment():
    preview = preview_diff.parse_preview("dev", 0, "error: could not read plugin\n", "")
    assert preview.failed and "printed no JSON" in preview.errors[0]


def test_the_script_renders_a_saved_preview(capsys):
    status = preview_diff.main(["--stack", "prod", "--from-json", str(PREVIEWS / "prod-outputs-claim-replaced-while-unprotected.json")])
    assert status == 0 and "> [!CAUTION]" in capsys.readouterr().out
    status = preview_diff.main(["--stack", "dev", "--from-json", str(PREVIEWS / "dev-nodes-0.json"), "--status", "255"])
    assert status == 255 and "The preview failed" in capsys.readouterr().out


def test_a_long_diff_is_folded_and_a_short_one_is_not():
    preview, _ = comment(recorded("dev-nodes-2-to-64"), "dev")
    line_count = len(preview.output.splitlines())
    folded = preview_diff.render_markdown(preview, fold_lines=line_count - 1)
    assert f"<details><summary>Diff ({line_count} lines)</summary>" in folded and folded.rstrip().endswith("</details>")
    shown = preview_diff.render_markdown(preview, fold_lines=line_count)
    assert "<details>" not in shown and "```diff" in shown


def test_a_diff_over_githubs_limit_is_cut_with_a_note():
    output = "".join(f"!       ~ line {i}: {'x' * 60}\n" for i in range(5000))
    preview = preview_diff.Preview("prod", 0, output, changes={"update": 1})
    markdown = preview_diff.render_markdown(preview)
    assert len(markdown) <= preview_diff.GITHUB_COMMENT_LIMIT
    assert "cut to fit GitHub's 65536-character comment limit" in markdown
    assert "`make preview-diff STACK=prod` prints all 5000 lines" in markdown
    assert markdown.count("```") == 2, "the diff block is still closed"
    assert markdown.rstrip().endswith("</details>")


def test_backticks_in_a_value_cannot_close_the_block():
    document = copy.deepcopy(recorded("dev-nodes-2-to-64"))
    step = next(s for s in changed_steps(document) if s["urn"].endswith("kubernetes:batch/v1:Job::ddp-trainer"))
    step["newState"]["inputs"]["spec"]["completions"] = "```rm -rf /```"
    _, markdown = comment(document, "dev")
    assert "````diff\n" in markdown and markdown.count("````") == 2


def test_a_huge_error_still_fits_with_the_changes():
    document = recorded("dev-nodes-0")
    document["diagnostics"][0]["message"] = "error: " + "x" * 100_000
    document["steps"] = recorded("dev-nodes-2-to-64")["steps"]
    _, markdown = comment(document, "dev", status=255)
    assert len(markdown) <= preview_diff.GITHUB_COMMENT_LIMIT
    assert "spec.completions: 2 => 64" in markdown
