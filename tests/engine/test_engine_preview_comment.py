"""The pull-request comment of scripts/preview_diff.py, made from real previews of the dev stack
(scaled to 64 nodes; given 0 nodes), and its limits on made-up previews."""

from __future__ import annotations

import re

import pytest

from scripts import preview_diff

pytestmark = pytest.mark.timeout(1800)

def test_comment_of_the_scaling_preview(scaled_to_64):
    preview = scaled_to_64.comment
    assert not preview.failed, preview.errors
    markdown = preview_diff.render_markdown(preview)

    lines = markdown.splitlines()
    assert lines[0] == "<!-- ddp-infra-preview:dev -->"
    engine_counts = scaled_to_64.preview["changeSummary"]  # from `pulumi preview --json`
    assert preview.changes == {op: count for op, count in engine_counts.items() if count}
    assert preview_diff.summary_line(engine_counts) in lines
    assert preview.destroyed == []
    assert re.search(r"^!\s+~ kubernetes:(apps/v1:StatefulSet|batch/v1:Job): \(update\)$", markdown, re.M), markdown
    assert re.search(rf"^!\s+~ replicas\s*: {scaled_to_64.dev_nodes} => {scaled_to_64.nodes}$", markdown, re.M)
    assert "[!CAUTION]" not in markdown, "nothing is replaced or deleted"
    assert "```diff" in markdown


def test_a_long_diff_is_folded_and_a_short_one_is_not(scaled_to_64):
    preview = scaled_to_64.comment
    line_count = len(preview.output.rstrip().splitlines())
    folded = preview_diff.render_markdown(preview, fold_lines=line_count - 1)
    assert f"<details><summary>Diff ({line_count} lines)</summary>" in folded
    assert folded.rstrip().endswith("</details>")
    shown = preview_diff.render_markdown(preview, fold_lines=line_count)
    assert "<details>" not in shown and "```diff" in shown


def test_a_failed_preview_puts_the_error_in_the_comment(dev):
    with dev.project.config_changed("dev", nodes="0"):
        preview = preview_diff.run_preview("dev", dev.project.dir, 900, env=dev.project.env)
    assert preview.failed
    markdown = preview_diff.render_markdown(preview)
    assert markdown.startswith("<!-- ddp-infra-preview:dev -->\n")
    assert "The preview failed" in markdown
    assert re.search(r"ddp-infra:nodes: got '?0'?", markdown), markdown


# `pulumi preview --diff` as the CLI prints it, for the cases a real preview of this project
# cannot produce on purpose: a claim replaced, and a failure.
REPLACED_CLAIM_DIFF = """\
Previewing update (prod):
  pulumi:pulumi:Stack: (same)
    [urn=urn:pulumi:prod::ddp-infra::pulumi:pulumi:Stack::ddp-infra-prod]
    ~ kubernetes:apps/v1:StatefulSet: (update)
        [id=ml-train/trainer]
        [urn=urn:pulumi:prod::ddp-infra::ddp:index:Stack$ddp:index:Trainer$kubernetes:apps/v1:StatefulSet::trainer]
      ~ spec: {
          ~ replicas: 8 => 64
        }
    +-kubernetes:core/v1:PersistentVolumeClaim: (replace)
        [id=ml-train/outputs]
        [urn=urn:pulumi:prod::ddp-infra::ddp:index:Stack$ddp:index:Storage$kubernetes:core/v1:PersistentVolumeClaim::outputs]
      ~ spec: {
          ~ storageClassName: "fast" => "slow"
        }
Resources:
    ~ 1 to update
    +-1 to replace
    2 changes. 12 unchanged
"""
FAILED_DIFF = """\
Previewing update (dev):
  pulumi:pulumi:Stack: (same)
    [urn=urn:pulumi:dev::ddp-infra::pulumi:pulumi:Stack::ddp-infra-dev]
Diagnostics:
  pulumi:pulumi:Stack (ddp-infra-dev):
    error: invalid stack configuration (1 problem(s)); nothing was created:
      ddp-infra:nodes: got '0'; allowed: greater than or equal to 1

Resources:
    1 unchanged
"""


def test_a_replaced_claim_raises_a_warning_above_the_diff():
    preview = preview_diff.parse_preview("prod", 0, REPLACED_CLAIM_DIFF, "")
    assert preview.changes == {"update": 1, "replace": 1, "same": 12}
    assert preview.destroyed == [("replace", "kubernetes:core/v1:PersistentVolumeClaim outputs")]
    markdown = preview_diff.render_markdown(preview)
    assert "**create 0 · update 1 · replace 1 · delete 0 · same 12**" in markdown
    warning = markdown.split("```")[0]
    assert "> [!CAUTION]" in warning and "hold data (PersistentVolumeClaim)" in warning
    assert "> - `kubernetes:core/v1:PersistentVolumeClaim outputs`: replace" in warning
    assert "\n-    +-kubernetes:core/v1:PersistentVolumeClaim: (replace)\n" in markdown
    assert "\n!          ~ replicas: 8 => 64\n" in markdown


def test_a_failed_preview_leads_with_its_error():
    preview = preview_diff.parse_preview("dev", 255, FAILED_DIFF, "")
    assert preview.errors == [
        "error: invalid stack configuration (1 problem(s)); nothing was created:\n"
        "  ddp-infra:nodes: got '0'; allowed: greater than or equal to 1"
    ]
    markdown = preview_diff.render_markdown(preview)
    head, _, rest = markdown.partition("<details>")
    assert "The preview failed (exit status 255)" in head and "ddp-infra:nodes: got '0'" in head
    assert rest.rstrip().endswith("</details>"), "the full output follows, folded"


def test_a_diff_over_githubs_limit_is_cut_with_a_note():
    output = "".join(f"    ~ line {i}: {'x' * 60}\n" for i in range(5000))
    preview = preview_diff.Preview("prod", 0, output, changes={"update": 1})
    markdown = preview_diff.render_markdown(preview)
    assert len(markdown) <= preview_diff.GITHUB_COMMENT_LIMIT
    assert "cut to fit GitHub's 65536-character comment limit" in markdown
    assert "`make preview-diff STACK=prod` prints all 5000 lines" in markdown
    assert markdown.count("```") == 2, "the diff block is still closed"
    assert markdown.rstrip().endswith("</details>")


def test_backticks_in_the_diff_cannot_close_the_block():
    preview = preview_diff.Preview("dev", 0, "    ~ command: ```rm -rf /```\n", changes={"update": 1})
    markdown = preview_diff.render_markdown(preview)
    assert "````diff\n" in markdown and markdown.count("````") == 2


def test_a_huge_error_still_fits_with_the_start_of_the_output():
    preview = preview_diff.parse_preview("dev", 255, FAILED_DIFF.replace("nothing was created:", "x" * 100_000), "")
    markdown = preview_diff.render_markdown(preview)
    assert len(markdown) <= preview_diff.GITHUB_COMMENT_LIMIT
    assert "Previewing update (dev):" in markdown
