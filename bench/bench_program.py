#!/usr/bin/env python3
"""Evaluate the Pulumi program under mocks at nodes=1 and nodes=512, side by side.

Shows that both register the same resources (type and name) and how long an evaluation takes
at each size: the program's cost must not grow with `nodes`, since a pod is one replica of a
template, not an object of its own.

    .venv/bin/python bench/bench_program.py [--repeat 20] [--stack dev]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

import pulumi

REPO = Path(__file__).resolve().parents[1]
# the program, and the mock harness's reading of the stack files as the engine hands them over
sys.path[:0] = [str(REPO), str(REPO / "tests" / "infra")]

from ddp_infra import config as stack_config  # noqa: E402
from ddp_infra import program  # noqa: E402
from infra_harness import engine_config, stack_file_config, with_path  # noqa: E402

SIZES = (1, 512)
# The program's warnings (e.g. ReadWriteOnce claims on a multi-node dev world) are part of its
# cost but not of this report: they go to a logger that prints nothing.
QUIET = logging.getLogger("bench_program.engine")
QUIET.addHandler(logging.NullHandler())
QUIET.propagate = False


class RecordingMocks(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.registered: list[tuple[str, str, dict]] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        self.registered.append((args.typ, args.name, args.inputs))
        return f"{args.name}-id", args.inputs

    def call(self, args: pulumi.runtime.MockCallArgs):
        return {}


def evaluate(stack: str, nodes: int) -> tuple[float, list[tuple[str, str, dict]]]:
    """One evaluation of the program (config load + every registration), timed."""
    mocks = RecordingMocks()
    started = time.perf_counter()
    pulumi.runtime.set_mocks(mocks, project=stack_config.PROJECT, stack=stack, preview=False, logger=QUIET)
    pulumi.runtime.set_all_config(engine_config(with_path(stack_file_config(stack), "nodes", str(nodes))))

    @pulumi.runtime.test
    def run():
        program.build(stack_config.load())

    run()
    return time.perf_counter() - started, mocks.registered


def replicas(registered: list[tuple[str, str, dict]]) -> int:
    """Pods the workload asks for (protobuf hands numbers back as floats)."""
    for type_, _, inputs in registered:
        if type_ == "kubernetes:apps/v1:StatefulSet":
            return int(inputs["spec"]["replicas"])
        if type_ == "kubernetes:batch/v1:Job":
            return int(inputs["spec"]["completions"])
    raise LookupError("no workload registered")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--stack", default="dev", choices=("dev", "prod"))
    args = parser.parse_args()

    for nodes in SIZES:  # warm-up: imports and first-use caches are not the program's cost
        evaluate(args.stack, nodes)
    times: dict[int, list[float]] = {nodes: [] for nodes in SIZES}
    registered: dict[int, list[tuple[str, str, dict]]] = {}
    for _ in range(args.repeat):
        for nodes in SIZES:  # interleaved, so drift in machine load hits both sizes alike
            elapsed, registered[nodes] = evaluate(args.stack, nodes)
            times[nodes].append(elapsed)

    resources = {nodes: sorted((type_, name) for type_, name, _ in registered[nodes]) for nodes in SIZES}
    small, large = SIZES
    print(f"stack {args.stack}, {args.repeat} evaluations per size, interleaved")
    print(f"{'type':<45} {'name':<20} " + " ".join(f"nodes={n:<6}" for n in SIZES))
    for type_, name in sorted(set(resources[small]) | set(resources[large])):
        print(f"{type_:<45} {name:<20} " + " ".join(f"{'yes' if (type_, name) in resources[n] else '-':<12}" for n in SIZES))
    print("replicas: " + ", ".join(f"nodes={n}: {replicas(registered[n])}" for n in SIZES))
    medians = {nodes: statistics.median(times[nodes]) * 1000 for nodes in SIZES}
    for nodes in SIZES:
        print(f"nodes={nodes:<4} median {medians[nodes]:7.2f} ms  (min {min(times[nodes]) * 1000:.2f}, max {max(times[nodes]) * 1000:.2f})")
    print(f"ratio nodes={large} / nodes={small}: {medians[large] / medians[small]:.2f}")
    same = resources[small] == resources[large]
    print(f"same resources registered: {'yes' if same else 'NO'} ({len(resources[small])} resources)")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
