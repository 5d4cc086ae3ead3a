"""The README and docs/ as a reader navigates them: every relative link leads to a file that exists
and, where it names a heading, to a heading that is there; every page of docs/ is reachable from
the README; and the README stays short enough to read through."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
PAGES = sorted((REPO / "docs").glob("*.md"))
README_MAX_LINES = 250
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {slug(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}


def relative_links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return [target for target in LINK.findall(text) if not re.match(r"[a-z]+:", target)]


def test_slug_follows_github():
    assert slug("The escape hatch (`pod.*`)") == "the-escape-hatch-pod"
    assert slug("Why `pulumi-kubernetes` is pinned at 4.25.0") == "why-pulumi-kubernetes-is-pinned-at-4250"
    assert slug("Deploy, scale, review") == "deploy-scale-review"


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda page: str(page.relative_to(REPO)))
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(page):
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no file {linked}")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.relative_to(REPO)}")
    assert not broken, broken


def test_every_page_of_docs_is_linked_from_the_readme():
    linked = {(REPO / target.partition("#")[0]).resolve() for target in relative_links(README)}
    assert PAGES and not [page.name for page in PAGES if page.resolve() not in linked]


def test_the_readme_is_short_enough_to_read_through():
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail to docs/"
