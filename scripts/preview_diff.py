#!/usr/bin/env python3
"""Runs `pulumi preview --json` for one stack and prints it as a pull-request comment in markdown.

    scripts/preview_diff.py --stack prod [--cwd DIR] [--fold-lines N]
    scripts/preview_diff.py --stack prod --from-json preview.json   (a preview already made)
    make preview-diff STACK=prod

The comment starts with a hidden marker line, `<!-- ddp-infra-preview:<stack> -->`, by which the
CI workflow finds and updates its own comment for the stack. Then come the counts of the preview's
operations (the engine's `changeSummary`), what each world's scheduler will do with it (the
program's `admission:` line: admitted whole at N, or at MIN growing to MAX, and what a lost pod
costs), a warning when anything would be replaced or deleted, louder for a PersistentVolumeClaim or a
Namespace (that loses data), protected or not, and the changes themselves, one resource per step
with the properties that change, folded when long and cut to fit GitHub's comment limit.

Everything comes from the engine's steps as data (op, urn, old and new state, detailedDiff), not
from the text the CLI prints, so a protected resource's lock sign or a new column in the CLI's
output cannot hide a replacement. The engine writes secrets as "[secret]" in that JSON, and this
script never asks it for plaintext (no --show-secrets).

Exit status: 0 when the preview succeeded; otherwise the preview's own status (or 1), with the
error in the markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MARKER_PREFIX = "ddp-infra-preview"
GITHUB_COMMENT_LIMIT = 65536
DEFAULT_FOLD_LINES = 40
DEFAULT_TIMEOUT_S = 1200
# The operations the summary always shows, in this order; others follow when they occur.
SUMMARY_OPS = ("create", "update", "replace", "delete", "same")
# Engine step operations that destroy an existing resource, by what the warning calls them
# (`pulumi preview --json` shows a replacement as one `replace` step; with
# --show-replacement-steps its parts appear too).
DESTRUCTIVE_OPS = {
    "replace": "replace", "create-replacement": "replace", "delete-replaced": "replace",
    "discard-replaced": "replace", "import-replacement": "replace", "delete": "delete", "discard": "delete",
}  # fmt: skip
PVC_TYPE = "kubernetes:core/v1:PersistentVolumeClaim"
NAMESPACE_TYPE = "kubernetes:core/v1:Namespace"
# Deleting these loses data: a claim its volume, a namespace every claim in it.
DATA_TYPES = (PVC_TYPE, NAMESPACE_TYPE)
ROOT_STACK_TYPE = "pulumi:pulumi:Stack"
ADMISSION_PREFIX = "admission: "  # how the program says what a world's scheduler will do (ddp_infra.gang.admission)
# How a step and a property change are written, as the CLI writes them, and the first-column mark
# GitHub colours in a ```diff block: + green, - red, ! orange.
OP_SYMBOLS = {
    "create": "+ ", "update": "~ ", "delete": "- ", "replace": "+-", "create-replacement": "++",
    "delete-replaced": "--", "discard": "- ", "discard-replaced": "--", "import": "= ", "import-replacement": "=>",
}  # fmt: skip
DIFF_KINDS = {"add": "+", "delete": "-", "update": "~"}
COLUMN_MARKS = {"+-": "-", "++": "+", "--": "-", "=>": "+", "+": "+", "-": "-", "~": "!"}
VALUE_WIDTH = 120
SECRET = "[secret]"  # what `pulumi preview --json` writes for every secret value


def marker(stack: str) -> str:
    return f"<!-- {MARKER_PREFIX}:{stack} -->"


@dataclass(frozen=True)
class Destroyed:
    """A resource a step replaces or deletes."""

    op: str  # replace or delete
    resource: str  # "Type name"
    protected: bool  # protected before this change
    unprotected_now: bool  # ... and this change removes the protection
    retained: bool = False  # retainOnDelete: Pulumi forgets it, the cluster keeps it

    @property
    def holds_data(self) -> bool:
        return self.resource.startswith(DATA_TYPES)

    def line(self) -> str:
        note = ""
        if self.unprotected_now:
            note = " (protected until now: this change removes `protect`)"
        elif self.protected:
            note = " (protected: the update will fail unless protection is removed)"
        if self.retained and self.op == "delete":
            note += " (retainOnDelete: left in the cluster, no longer managed)"
        return f"> - `{self.resource}`: {self.op}{note}"


@dataclass
class Preview:
    """What one `pulumi preview --json` run produced."""

    stack: str
    returncode: int
    output: str  # the changes, one resource a step, as the diff block shows them
    changes: dict[str, int] = field(default_factory=dict)  # operation -> number of resources
    destroyed: list[Destroyed] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    admissions: list[str] = field(default_factory=list)  # each world's `admission:` line

    @property
    def failed(self) -> bool:
        return self.returncode != 0


def run_preview(stack: str, cwd: Path, timeout_s: float, env: dict[str, str] | None = None) -> Preview:
    """Runs the preview in `cwd` with `env` (default: this process's environment)."""
    pulumi = shutil.which("pulumi", path=(env or os.environ).get("PATH"))
    if pulumi is None:
        return Preview(stack, 127, "", errors=["the `pulumi` CLI is not on PATH: run `make setup`, then `make preview-diff`"])
    command = [pulumi, "preview", "--json", "--stack", stack, "--non-interactive"]
    try:
        done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return Preview(stack, 124, "", errors=[f"`pulumi preview` did not finish within {timeout_s:.0f} s"])
    return parse_preview(stack, done.returncode, done.stdout, done.stderr)


def parse_preview(stack: str, returncode: int, stdout: str, stderr: str = "") -> Preview:
    """The comment's content from `pulumi preview --json`'s document (and its exit status, stderr)."""
    try:
        digest = json.loads(stdout) if stdout.strip() else {}
    except json.JSONDecodeError as error:
        return Preview(stack, returncode or 1, stdout, errors=[f"`pulumi preview --json` printed no JSON ({error})", stderr.strip()])
    preview = Preview(stack, returncode, "")
    preview.changes = {op: count for op, count in (digest.get("changeSummary") or {}).items() if count}
    preview.admissions = [
        diagnostic["message"].strip() for diagnostic in digest.get("diagnostics") or []
        if diagnostic.get("severity") == "info" and diagnostic["message"].startswith(ADMISSION_PREFIX)
    ]  # fmt: skip
    steps = [step for step in digest.get("steps") or [] if _shown(step)]
    preview.output = "\n".join(line for step in steps for line in _step_lines(step))
    # A component holds nothing: its delete is its children's, which are listed themselves.
    preview.destroyed = [_destroyed(step) for step in steps if step["op"] in DESTRUCTIVE_OPS and _custom(step)]
    preview.errors = [
        diagnostic["message"].strip() for diagnostic in digest.get("diagnostics") or []
        if diagnostic.get("severity") == "error"
    ]  # fmt: skip
    if preview.failed and not preview.errors:
        preview.errors.append(stderr.strip() or f"`pulumi preview` exited with status {returncode}")
    return preview


def _shown(step: dict[str, Any]) -> bool:
    """Every step but an unchanged root stack (a `same` step is listed only when protection changes)
    and a read, which changes nothing (every run reads the stack's last outputs: ddp_infra.claim_changes)."""
    return step["op"] != "read" and not (step["op"] == "same" and _type(step["urn"]) == ROOT_STACK_TYPE)


def _custom(step: dict[str, Any]) -> bool:
    return bool((step.get("oldState") or step.get("newState") or {}).get("custom", True))


def _type(urn: str) -> str:
    """`kubernetes:apps/v1:StatefulSet` from urn:pulumi:<stack>::<project>::<parent types>$<type>::<name>."""
    return urn.split("::")[2].rsplit("$", 1)[-1]


def _resource_name(urn: str) -> str:
    """`Type name` of a URN."""
    return f"{_type(urn)} {urn.split('::', 3)[3]}"


def _protect(step: dict[str, Any], state: str) -> bool:
    return bool((step.get(state) or {}).get("protect"))


def _destroyed(step: dict[str, Any]) -> Destroyed:
    before, after = _protect(step, "oldState"), _protect(step, "newState")
    retained = bool((step.get("oldState") or {}).get("retainOnDelete"))
    return Destroyed(DESTRUCTIVE_OPS[step["op"]], _resource_name(step["urn"]), before, before and not after, retained)


def _step_lines(step: dict[str, Any]) -> list[str]:
    op = step["op"]
    symbol = OP_SYMBOLS.get(op, "  ")
    notes = []
    before, after = _protect(step, "oldState"), _protect(step, "newState")
    if before != after:
        notes.append("protect removed" if before else "protect added")
    elif after:
        notes.append("protected")
    head = f"{symbol}{_resource_name(step['urn'])}: ({op})" + (f" [{', '.join(notes)}]" if notes else "")
    lines = [f"{_column_mark(symbol)} {head}"]
    old = (step.get("oldState") or {}).get("inputs") or {}
    new = (step.get("newState") or {}).get("inputs") or {}
    detailed = step.get("detailedDiff")
    if detailed:
        for path, diff in sorted(detailed.items(), key=lambda item: _path_sort_key(item[0])):
            kind = diff.get("kind", "update")
            base = kind.removesuffix("-replace")
            mark = DIFF_KINDS.get(base, "~")
            text = _change_text(base, _value_at(old, path), _value_at(new, path))
            forced = " (forces replacement)" if kind.endswith("-replace") else ""
            lines.append(f"{COLUMN_MARKS[mark]}       {mark} {path}{_item_name(new, old, path)}: {text}{forced}")
    else:
        replace_reasons = set(step.get("replaceReasons") or [])
        for key in step.get("diffReasons") or []:
            forced = " (forces replacement)" if key in replace_reasons else ""
            lines.append(f"!       ~ {key}{forced}")
    return lines


def _column_mark(symbol: str) -> str:
    """GitHub colours a ```diff block by the first column only, so each line starts with its mark."""
    return COLUMN_MARKS.get(symbol, COLUMN_MARKS.get(symbol[:1], " "))


def _item_name(new: Any, old: Any, path: str) -> str:
    """` (NNODES)` for a path into a list of named items (env, containers, volumes), else ''."""
    parts = _path_parts(path)
    for inputs in (new, old):
        node, name = inputs, None
        for part in parts:
            if isinstance(part, int) and isinstance(node, list) and part < len(node):
                node = node[part]
                name = node.get("name") if isinstance(node, dict) else name
            elif isinstance(part, str) and isinstance(node, dict) and part in node:
                node = node[part]
            else:
                break
        if isinstance(name, str):
            return f" ({name})"
    return ""


_MISSING = object()
_PATH_PART = re.compile(r'\.?([A-Za-z_$][\w$-]*)|\[(\d+)\]|\["((?:[^"\\]|\\.)*)"\]')


def _path_parts(path: str) -> list[str | int]:
    """A detailedDiff property path (`spec.template.spec.containers[0].env[3].value`,
    `metadata.labels["app.kubernetes.io/name"]`) as keys and indexes."""
    parts: list[str | int] = []
    for match in _PATH_PART.finditer(path):
        name, index, quoted = match.groups()
        parts.append(int(index) if index is not None else name if name is not None else json.loads(f'"{quoted}"'))
    return parts


def _path_sort_key(path: str) -> list[tuple[int, str | int]]:
    return [(0, part) if isinstance(part, int) else (1, part) for part in _path_parts(path)]


def _value_at(inputs: Any, path: str) -> Any:
    node = inputs
    for part in _path_parts(path):
        if node == SECRET:  # the engine masks a secret value whole
            return SECRET
        if isinstance(part, int) and isinstance(node, list) and part < len(node):
            node = node[part]
        elif isinstance(part, str) and isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return _MISSING
    return node


def _shown_value(value: Any) -> str:
    text = json.dumps(value, sort_keys=True) if not isinstance(value, (int, float)) or isinstance(value, bool) else str(value)
    return text if len(text) <= VALUE_WIDTH else text[: VALUE_WIDTH - 3] + "..."


def _change_text(kind: str, old: Any, new: Any) -> str:
    if kind == "add" or old is _MISSING:
        return _shown_value(new) if new is not _MISSING else "(added)"
    if kind == "delete" or new is _MISSING:
        return f"{_shown_value(old)} (removed)"
    return f"{_shown_value(old)} => {_shown_value(new)}"


def _fence(text: str, info: str = "") -> str:
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{info}\n{text}\n{ticks}"


def summary_line(changes: dict[str, int]) -> str:
    """The engine's counts; reads are left out, as they are from the diff (they change nothing)."""
    ops = list(SUMMARY_OPS) + sorted(op for op in changes if op not in SUMMARY_OPS and op != "read")
    return "**" + " · ".join(f"{op} {changes.get(op, 0)}" for op in ops) + "**"


def warning_lines(destroyed: list[Destroyed]) -> list[str]:
    if not destroyed:
        return []
    data = [entry for entry in destroyed if entry.holds_data]
    lines = [
        "> [!CAUTION]",
        f"> **{len(destroyed)} resource(s) would be replaced or deleted.**"
        + (f" **{len(data)} of them hold data (PersistentVolumeClaim or Namespace): what they hold would be lost.**" if data else ""),
    ]
    # the ones that hold data first
    lines += [entry.line() for entry in sorted(destroyed, key=lambda entry: not entry.holds_data)]
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
        head += [f"**Admission**: {line.removeprefix(ADMISSION_PREFIX)}" for line in preview.admissions] + ([""] if preview.admissions else [])
    if warnings := warning_lines(preview.destroyed):
        head += warnings + [""]
    diff = preview.output.rstrip()
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
    parser.add_argument("--from-json", type=Path, metavar="FILE", help="render this `pulumi preview --json` output instead of running one")
    parser.add_argument("--status", type=int, default=0, help="with --from-json: the exit status of that preview")
    args = parser.parse_args(argv)
    if args.from_json:
        preview = parse_preview(args.stack, args.status, args.from_json.read_text())
    else:
        preview = run_preview(args.stack, args.cwd, args.timeout)
    sys.stdout.write(render_markdown(preview, args.fold_lines))
    return (preview.returncode or 1) if preview.failed else 0


if __name__ == "__main__":
    sys.exit(main())
