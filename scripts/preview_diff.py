#!/usr/bin/env python3
"""Runs `pulumi preview --diff` for one stack and prints it as a pull-request comment in markdown.

    scripts/preview_diff.py --stack prod [--cwd DIR] [--fold-lines N]
    make preview-diff STACK=prod

The comment starts with a hidden marker line, `<!-- ddp-infra-preview:<stack> -->`, by which the
CI workflow finds and updates its own comment for the stack. Then come the counts of the preview's
operations, a warning when anything would be replaced or deleted (a PersistentVolumeClaim above
all: that loses data), and the diff itself, folded when long and cut to fit GitHub's comment limit.

The CLI masks secrets in what it prints, and this script never asks it for plaintext
(no --show-secrets). The counts and the operations come from the same text the reviewer reads
(the `Resources:` summary and each resource's `(operation)`), so they can never disagree with it.

Exit status: 0 when the preview succeeded; otherwise the preview's own status (or 1), with the
error in the markdown.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

MARKER_PREFIX = "ddp-infra-preview"
GITHUB_COMMENT_LIMIT = 65536
DEFAULT_FOLD_LINES = 40
DEFAULT_TIMEOUT_S = 1200
# The operations the summary always shows, in this order; others follow when they occur.
SUMMARY_OPS = ("create", "update", "replace", "delete", "same")
# Engine step operations that destroy an existing resource, by what the warning calls them
# (one replacement shows up as several steps).
DESTRUCTIVE_OPS = {
    "replace": "replace", "create-replacement": "replace", "delete-replaced": "replace",
    "discard-replaced": "replace", "import-replacement": "replace", "delete": "delete", "discard": "delete",
}  # fmt: skip
PVC_TYPE = "kubernetes:core/v1:PersistentVolumeClaim"
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# Pulumi's diff starts each changed line with a mark: two characters ("+-" replace, "++" create
# replacement, "--" delete replaced) or one and a space ("+ ", "- ", "~ "). GitHub colours a
# ```diff block by the first column only, so the mark is repeated there: + green, - red, ! orange.
TWO_CHARACTER_MARKS = {"+-": "-", "++": "+", "--": "-"}
ONE_CHARACTER_MARKS = {"+": "+", "-": "-", "~": "!"}


def marker(stack: str) -> str:
    return f"<!-- {MARKER_PREFIX}:{stack} -->"


@dataclass
class Preview:
    """What one `pulumi preview --diff` run produced."""

    stack: str
    returncode: int
    output: str  # the human diff, as a reviewer reads it in a terminal
    changes: dict[str, int] = field(default_factory=dict)  # operation -> number of resources
    destroyed: list[tuple[str, str]] = field(default_factory=list)  # (replace or delete, "Type name")
    errors: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.returncode != 0


def run_preview(stack: str, cwd: Path, timeout_s: float, env: dict[str, str] | None = None) -> Preview:
    """Runs the preview in `cwd` with `env` (default: this process's environment)."""
    pulumi = shutil.which("pulumi", path=(env or os.environ).get("PATH"))
    if pulumi is None:
        return Preview(stack, 127, "", errors=["the `pulumi` CLI is not on PATH: run `make setup`, then `make preview-diff`"])
    command = [pulumi, "preview", "--diff", "--stack", stack, "--non-interactive", "--color", "never"]
    try:
        done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as expired:
        output = _text(expired.stdout) + _text(expired.stderr)
        return Preview(stack, 124, output, errors=[f"`pulumi preview` did not finish within {timeout_s:.0f} s"])
    return parse_preview(stack, done.returncode, done.stdout, done.stderr)


def _text(captured: str | bytes | None) -> str:
    if isinstance(captured, bytes):
        return captured.decode(errors="replace")
    return captured or ""


# The lines of `pulumi preview --diff` this script reads; everything else is passed on as it is.
RESOURCE_LINE = re.compile(r"^\s*(?:[-+~<>=]{1,2} ?)?(?P<type>[^\s:]+:[^\s:]*:[^\s:]+): \((?P<op>[a-z-]+)\)$")
URN_LINE = re.compile(r"^\s*\[urn=(?P<urn>[^\]]+)\]$")
SUMMARY_CHANGE = re.compile(r"^\s*(?:[-+~<>=]{1,2} ?)?(?P<count>\d+) to (?P<op>[a-z -]+)$")
SUMMARY_UNCHANGED = re.compile(r"^\s*(?:\d+ changes?\. )?(?P<count>\d+) unchanged$")


def parse_preview(stack: str, returncode: int, stdout: str, stderr: str) -> Preview:
    """What the human diff says: each resource's operation, the summary's counts, the errors."""
    output = ANSI_ESCAPE.sub("", stdout + ("\n" + stderr if stderr.strip() else ""))
    preview = Preview(stack, returncode, output)
    lines = output.splitlines()
    destroyed: dict[str, str] = {}  # resource -> replace or delete
    section = None
    for index, line in enumerate(lines):
        if line in ("Resources:", "Diagnostics:", "Outputs:"):
            section = line
        elif section is None and (resource := RESOURCE_LINE.match(line)):
            if resource["op"] in DESTRUCTIVE_OPS:
                urns = [m["urn"] for m in map(URN_LINE.match, lines[index + 1 : index + 3]) if m]
                destroyed[_resource_name(urns[0]) if urns else resource["type"]] = DESTRUCTIVE_OPS[resource["op"]]
        elif section == "Resources:" and (change := SUMMARY_CHANGE.match(line)):
            preview.changes[change["op"].strip()] = int(change["count"])
        elif section == "Resources:" and (unchanged := SUMMARY_UNCHANGED.match(line)):
            preview.changes["same"] = int(unchanged["count"])
        elif section == "Diagnostics:" and line.lstrip().startswith("error: "):
            preview.errors.append(_diagnostic(lines, index))
    preview.destroyed = [(op, name) for name, op in destroyed.items()]
    if preview.failed and not preview.errors:
        preview.errors.append(stderr.strip() or f"`pulumi preview` exited with status {returncode}")
    return preview


def _diagnostic(lines: list[str], index: int) -> str:
    """The error on lines[index] and its continuation lines, up to a blank line, a line indented
    less, or the next diagnostic."""
    indent = len(lines[index]) - len(lines[index].lstrip())
    message = [lines[index].strip()]
    for line in lines[index + 1 :]:
        stripped = line.lstrip()
        if not stripped or len(line) - len(stripped) < indent or stripped.startswith(("error: ", "warning: ")):
            break
        message.append(line[indent:].rstrip())
    return "\n".join(message)


def _resource_name(urn: str) -> str:
    """`Type name` from urn:pulumi:stack::project::parent$Type::name."""
    _, _, qualified_type, name = urn.split("::", 3)
    return f"{qualified_type.rsplit('$', 1)[-1]} {name}"


def _fence(text: str, info: str = "") -> str:
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{info}\n{text}\n{ticks}"


def as_diff_block(output: str) -> str:
    """The CLI's diff with its change marks repeated in the first column, which GitHub colours."""
    lines = []
    for line in ANSI_ESCAPE.sub("", output).rstrip().splitlines():
        stripped = line.lstrip()
        if stripped[:2] in TWO_CHARACTER_MARKS:
            mark = TWO_CHARACTER_MARKS[stripped[:2]]
        elif stripped[1:2] == " ":
            mark = ONE_CHARACTER_MARKS.get(stripped[:1], " ")
        else:
            mark = " "
        lines.append(f"{mark}{line}")
    return "\n".join(lines)


def summary_line(changes: dict[str, int]) -> str:
    ops = list(SUMMARY_OPS) + sorted(op for op in changes if op not in SUMMARY_OPS)
    return "**" + " · ".join(f"{op} {changes.get(op, 0)}" for op in ops) + "**"


def warning_lines(destroyed: list[tuple[str, str]]) -> list[str]:
    if not destroyed:
        return []
    volumes = [name for _, name in destroyed if name.startswith(PVC_TYPE)]
    lines = [
        "> [!CAUTION]",
        f"> **{len(destroyed)} resource(s) would be replaced or deleted.**"
        + (f" **{len(volumes)} of them hold data (PersistentVolumeClaim): their volumes would be lost.**" if volumes else ""),
    ]
    lines += [f"> - `{name}`: {op}" for op, name in destroyed]
    return lines


def render_markdown(preview: Preview, fold_lines: int = DEFAULT_FOLD_LINES, limit: int = GITHUB_COMMENT_LIMIT) -> str:
    """The comment for one stack; never longer than `limit` characters."""
    head = [marker(preview.stack), f"### Pulumi preview of stack `{preview.stack}`", ""]
    if preview.failed:
        # the errors come first and unfolded, but may not crowd out the diff
        errors = "\n\n".join(preview.errors)[: limit // 4]
        head += [f"**:x: The preview failed (exit status {preview.returncode}).**", "", _fence(errors, "text"), ""]
    else:
        head += [summary_line(preview.changes), ""]
    if warnings := warning_lines(preview.destroyed):
        head += warnings + [""]
    diff = as_diff_block(preview.output)
    line_count = diff.count("\n") + 1 if diff else 0
    folded = preview.failed or line_count > fold_lines
    opening = [f"<details><summary>Diff ({line_count} lines)</summary>", ""] if folded else []
    closing = ["", "</details>"] if folded else []

    def assemble(diff_text: str, note: list[str]) -> str:
        return "\n".join(head + opening + [_fence(diff_text, "diff")] + note + closing) + "\n"

    body = assemble(diff, [])
    if len(body) <= limit:
        return body
    note = [
        "",
        f"*The diff was cut to fit GitHub's {limit}-character comment limit; "
        f"`make preview-diff STACK={preview.stack}` prints all {line_count} lines.*",
    ]
    budget = limit - len(assemble("", note))
    kept = diff[: max(budget, 0)]
    kept = kept[: kept.rfind("\n")] if "\n" in kept else kept
    return assemble(kept, note)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", required=True, help="the stack to preview, e.g. dev or prod")
    parser.add_argument("--cwd", type=Path, default=Path(__file__).resolve().parent.parent, help="the project directory")
    parser.add_argument("--fold-lines", type=int, default=DEFAULT_FOLD_LINES, help="fold diffs longer than this")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds the preview may take")
    args = parser.parse_args(argv)
    preview = run_preview(args.stack, args.cwd, args.timeout)
    sys.stdout.write(render_markdown(preview, args.fold_lines))
    return (preview.returncode or 1) if preview.failed else 0


if __name__ == "__main__":
    sys.exit(main())
