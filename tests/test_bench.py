"""The benchmark scripts are run by hand or on a lent GPU, never by the suite: each must at least import
in one interpreter, so that a moved module of the trainer's breaks the suite and not a card's minutes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_every_benchmark_script_imports():
    scripts = sorted(path.stem for path in (REPO / "bench").glob("*.py"))
    assert len(scripts) > 10, scripts
    program = "; ".join(f"import {name}" for name in scripts)
    done = subprocess.run([sys.executable, "-c", program], cwd=REPO / "bench", env={"PYTHONPATH": str(REPO / "bench")},
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
