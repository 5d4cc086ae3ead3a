"""Benchmark of how a process that imported the trainer ends (a measurement, not a test).

Each world a pod starts has an agent and a fork server that imported torch; both now leave without
tearing their interpreters down (trainer/pod/quick_exit.py). Side by side, interleaved, a process
that imports the trainer's training module (what a fork server holds) and then:
  - teardown: ends as the interpreter ends it;
  - leave: ends through quick_exit.leave (its exit functions run, its streams flushed).
The figure is the process's CPU seconds (user + system), the median over the rounds; the ratio is
leave / teardown. The import is in both, so the difference is the teardown.
Usage: nice .venv/bin/python bench/bench_exit.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
from pathlib import Path

from report import print_table  # bench/report.py: the scripts run with bench/ on sys.path

ENDINGS = {
    "teardown": "import trainer.train",
    "leave": "import trainer.train\nfrom trainer.pod.quick_exit import leave\nleave(0)",
}
REPO = Path(__file__).resolve().parents[1]


def cpu_seconds(code: str) -> float:
    """CPU seconds of a Python process running `code` to its end."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    seconds: dict[str, list[float]] = {name: [] for name in ENDINGS}
    for _ in range(args.rounds):  # interleaved: drift on a shared machine hits both alike
        for name, code in ENDINGS.items():
            seconds[name].append(cpu_seconds(code))
    teardown, leave = (statistics.median(seconds[name]) for name in ("teardown", "leave"))
    print_table(
        f"a process that imported trainer.train, CPU seconds to its end, median of {args.rounds}",
        [("teardown (the interpreter's exit)", f"{teardown:.2f}"), ("leave (quick_exit.leave)", f"{leave:.2f}"),
         ("leave / teardown", f"{leave / teardown:.2f}")],  # fmt: skip
    )


if __name__ == "__main__":
    main()
