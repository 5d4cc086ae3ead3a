"""Whether toolchain/build.sh proved that a component cannot be built here: its UNAVAILABLE file
(in the tools' directory) quotes the Go module proxy's refusal, a component a line. Only that proof
skips a test; anything else missing fails it, saying what to run."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn, Optional

import pytest


def refusal(name: str, bin_dir: Path) -> Optional[str]:
    """`<file>: <name>: <the proxy's answer>` where the build recorded one for `name`, else None."""
    unavailable = bin_dir / "UNAVAILABLE"
    lines = unavailable.read_text().splitlines() if unavailable.exists() else []
    refused = [line for line in lines if line.startswith(f"{name}:")]
    return f"{unavailable}: {refused[0]}" if refused else None


def skip_if_refused_else_fail(name: str, bin_dir: Path, missing: str) -> NoReturn:
    """A skip quoting the proxy's refusal of `name`; without one, a failure: `missing` says what is not there."""
    if said := refusal(name, bin_dir):
        pytest.skip(f"{missing}; the proxy refused it ({said})")
    pytest.fail(f"{missing}: run `make setup` (toolchain/build.sh)", pytrace=False)
