"""How the benchmark scripts print their figures: a title line, then name and value in two columns."""

from __future__ import annotations


def print_table(title: str, rows: list[tuple[str, str]]) -> None:
    width = max(len(name) for name, _ in rows)
    print(title)
    for name, value in rows:
        print(f"  {name:<{width}}  {value:>12}")
