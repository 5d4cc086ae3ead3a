#!/usr/bin/env python3
"""The config reference table, generated from the pydantic models in ddp_infra/config/.

    scripts/config_reference.py                                print the markdown table
    scripts/config_reference.py --write docs/configuration.md  replace the table between the markers
    scripts/config_reference.py --check docs/configuration.md  exit 1 if the table there is stale
"""

from __future__ import annotations

import argparse
import json
import sys
import types
import typing
from pathlib import Path
from typing import Any, Iterator, Literal, Union

from pydantic import BaseModel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ddp_infra.config import StackConfig  # noqa: E402
from ddp_infra.config.nodes import NodeRange  # noqa: E402
from ddp_infra.names import PROJECT  # noqa: E402

START = "<!-- config-reference:start -->"
END = "<!-- config-reference:end -->"


def _strip_optional(annotation: Any) -> tuple[Any, bool]:
    if typing.get_origin(annotation) in (Union, types.UnionType):
        args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(args) == 1:
            return args[0], True
    return annotation, False


def _allowed_of(metadata: list[Any]) -> list[str]:
    """Constraints a field carries: bounds, lengths, and the text of our pattern checks."""
    notes = []
    for item in metadata:
        if hasattr(item, "metadata"):  # a Field(...) inside Annotated carries its constraints there
            notes += _allowed_of(item.metadata)
            continue
        for bound, sign in (("ge", "≥"), ("le", "≤"), ("min_length", "min length"), ("max_length", "max length")):
            if getattr(item, bound, None) is not None:
                notes.append(f"{sign} {getattr(item, bound)}")
        allowed = getattr(getattr(item, "func", None), "allowed", None)
        if allowed:
            notes.append(allowed)
    return notes


def _type_name(annotation: Any) -> str:
    annotation, _ = _strip_optional(annotation)
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        base, *metadata = typing.get_args(annotation)
        notes = _allowed_of(metadata)
        name = _type_name(base)
        return f"{name} ({'; '.join(notes)})" if notes else name
    if origin is Literal:
        return "one of " + ", ".join(f"`{value}`" for value in typing.get_args(annotation))
    if origin in (tuple, list):
        return f"list of {_type_name(typing.get_args(annotation)[0])}"
    if origin is dict:
        key, value = typing.get_args(annotation)
        return f"map of {_type_name(key)} to {_type_name(value)}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "object"
    if getattr(annotation, "__name__", "") == "Output":
        return "secret string"
    names = {int: "integer", bool: "boolean", str: "string", NodeRange: "integer or range"}
    return names.get(annotation, getattr(annotation, "__name__", "any"))


def _default_text(field: Any) -> str:
    if field.is_required():
        return "required"
    default = field.get_default(call_default_factory=True)
    if isinstance(default, BaseModel) or default is None or default in ({}, ()):
        return ""
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    if isinstance(default, (tuple, dict)):
        return f"`{json.dumps(list(default) if isinstance(default, tuple) else default)}`"
    return f"`{default}`"


def rows(model: type[BaseModel] = StackConfig, prefix: str = "") -> Iterator[tuple[str, str, str, str]]:
    """(key, type, default, description) for every key, nested ones after their parent."""
    for field in model.model_fields.values():
        key = f"{prefix}{field.alias}"
        annotation, _ = _strip_optional(field.annotation)
        constraints = _allowed_of(field.metadata)
        type_name = _type_name(annotation) + (f" ({'; '.join(constraints)})" if constraints else "")
        yield key, type_name, _default_text(field), (field.description or "").replace("|", "\\|")
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from rows(annotation, f"{key}.")
        elif typing.get_origin(annotation) is tuple:
            (item,) = typing.get_args(annotation)[:1]
            if isinstance(item, type) and issubclass(item, BaseModel):
                yield from rows(item, f"{key}[].")


def table() -> str:
    lines = [
        f"Keys are set with `pulumi config set [--path] <key> <value>` (project `{PROJECT}`); nested keys with `--path`.",
        "",
        "| key | type | default | description |",
        "| --- | --- | --- | --- |",
    ]
    lines += [f"| `{key}` | {type_} | {default} | {description} |" for key, type_, default, description in rows()]
    return "\n".join(lines)


def region(text: str) -> str:
    """The text between the markers (without them)."""
    start, end = text.index(START) + len(START), text.index(END)
    return text[start:end].strip("\n")


def replaced(text: str) -> str:
    start, end = text.index(START) + len(START), text.index(END)
    return f"{text[:start]}\n{table()}\n{text[end:]}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", type=Path, metavar="PAGE", help="replace the table between the markers")
    group.add_argument("--check", type=Path, metavar="PAGE", help="fail if the table there differs")
    args = parser.parse_args()
    if args.write:
        args.write.write_text(replaced(args.write.read_text()))
    elif args.check:
        if region(args.check.read_text()) != table():
            print(f"{args.check}: the config reference is stale; run {sys.argv[0]} --write {args.check}")
            return 1
    else:
        print(table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
