"""The pull-request comment of scripts/preview_diff.py, made from real previews of the dev stack
(scaled to 64 nodes; given 0 nodes). The same comment on recorded previews, and its limits, are
in test_engine_preview_comment_recorded.py."""

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
    engine_counts = scaled_to_64.preview["changeSummary"]  # from the fixture's own `pulumi preview --json`
    assert preview.changes == {op: count for op, count in engine_counts.items() if count}
    assert preview_diff.summary_line(engine_counts) in lines
    # A new size is a new world: the Job is replaced; nothing that holds data is.
    assert preview.destroyed == [preview_diff.Destroyed(op="replace", resource="kubernetes:batch/v1:Job ddp-trainer",
                                                        protected=False, unprotected_now=False, retained=False)]  # fmt: skip
    assert re.search(rf"^!\s+~ spec\.completions: {scaled_to_64.dev_nodes} => {scaled_to_64.nodes} \(forces replacement\)$",
                     markdown, re.M), markdown  # fmt: skip
    assert "hold data" not in markdown, markdown
    assert "```diff" in markdown


def test_a_failed_preview_puts_the_error_in_the_comment(dev):
    with dev.project.config_changed("dev", nodes="0"):
        preview = preview_diff.run_preview("dev", dev.project.dir, 900, env=dev.project.env)
    assert preview.failed
    markdown = preview_diff.render_markdown(preview)
    assert markdown.startswith("<!-- ddp-infra-preview:dev -->\n")
    assert "The preview failed" in markdown
    assert re.search(r"ddp-infra:nodes: got '?0'?", markdown), markdown
