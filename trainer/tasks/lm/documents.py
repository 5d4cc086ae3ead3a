"""Where the language model's documents come from: JSONL, plain text, or a Hugging Face dataset on disk.

A source is read in batches of documents, so that no reader holds a whole corpus in memory:
  - `.jsonl` / `.json`: one JSON object a line, its text under --text-field;
  - `.txt`: documents separated by one or more blank lines (a book is then many documents,
    each a paragraph or more, and a file of any size streams line by line);
  - a directory: a `datasets.Dataset` saved with `save_to_disk`, its text under --text-field
    (needs the `datasets` package, imported only then).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

JSONL_SUFFIXES = (".jsonl", ".json")
TEXT_SUFFIXES = (".txt",)
BATCH_CHARS = 1 << 20  # characters a batch of documents holds before it is handed on


def read_texts(path: Path, field: str) -> Iterator[str]:
    """The documents of a JSONL file, one a line."""
    with open(path, encoding="utf-8") as file:
        for number, line in enumerate(file, start=1):
            if not line.strip():
                continue
            try:
                text = json.loads(line)[field]
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{number}: expected a JSON object with a {field!r} string") from exc
            if not isinstance(text, str):
                raise ValueError(f"{path}:{number}: expected a JSON object with a {field!r} string")
            yield text


def read_paragraphs(path: Path) -> Iterator[str]:
    """The documents of a text file: runs of lines between blank lines, without their last newline."""
    lines: list[str] = []
    with open(path, encoding="utf-8") as file:
        for line in file:
            if line.strip():
                lines.append(line)
            elif lines:
                yield "".join(lines).rstrip("\n")
                lines = []
    if lines:
        yield "".join(lines).rstrip("\n")


def datasets_missing_message(flag: str, path: Path) -> str:
    return (
        f"{flag} {path} is a directory, read as a Hugging Face dataset saved with save_to_disk, which needs "
        "the datasets package: pip install datasets"
    )


def read_dataset_texts(path: Path, field: str, flag: str) -> Iterator[str]:
    """The documents of a `datasets.Dataset` saved with `save_to_disk`, read from its memory-mapped files."""
    try:
        from datasets import Dataset, load_from_disk
    except ImportError as exc:
        raise SystemExit(datasets_missing_message(flag, path)) from exc
    dataset = load_from_disk(str(path))
    if not isinstance(dataset, Dataset):  # a DatasetDict: each split is a directory of its own
        splits = ", ".join(dataset)
        raise SystemExit(f"{flag} {path} holds the splits {splits}: give one split's directory, e.g. {path / next(iter(dataset))}")
    if field not in dataset.column_names:
        raise SystemExit(f"{flag} {path}: no column {field!r} (--text-field); the columns are {', '.join(dataset.column_names)}")
    for batch in dataset.iter(batch_size=1024):
        yield from batch[field]


@dataclass(frozen=True)
class DocumentSource:
    path: Path
    text_field: str
    flag: str  # the flag that named the path, for messages

    @property
    def kind(self) -> str:
        if self.path.is_dir():
            return "hf-dataset"
        if self.path.suffix in JSONL_SUFFIXES:
            return "jsonl"
        if self.path.suffix in TEXT_SUFFIXES:
            return "text"
        raise SystemExit(
            f"{self.flag} {self.path}: unknown kind of file; allowed: {', '.join(JSONL_SUFFIXES + TEXT_SUFFIXES)} "
            "or a directory saved by datasets' save_to_disk"
        )

    def texts(self) -> Iterator[str]:
        kind = self.kind
        if kind == "jsonl":
            return read_texts(self.path, self.text_field)
        if kind == "text":
            return read_paragraphs(self.path)
        return read_dataset_texts(self.path, self.text_field, self.flag)

    def batches(self, batch_chars: int = BATCH_CHARS) -> Iterator[list[str]]:
        batch: list[str] = []
        size = 0
        for text in self.texts():
            batch.append(text)
            size += len(text)
            if size >= batch_chars:
                yield batch
                batch, size = [], 0
        if batch:
            yield batch

    def identity(self) -> dict:
        """What a cached tokenization depends on here: the reader, and each file's path, size and mtime.
        (Not a content hash: that would read a corpus of many GB on every start.)"""
        files = sorted(p for p in self.path.rglob("*") if p.is_file()) if self.path.is_dir() else [self.path]
        stats = [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in files]
        return {"kind": self.kind, "text_field": self.text_field if self.kind != "text" else None, "files": stats}
