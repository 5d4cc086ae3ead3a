#!/usr/bin/env python3
"""Evaluate the Pulumi program under mocks at nodes=1 and nodes=512, side by side; then, with the
Pulumi engine on PATH, `pulumi preview` of the dev stack against a one-resource program.

The first part shows that both sizes register the same resources (type and name) and how long an
evaluation takes at each: the program's cost must not grow with `nodes`, since a pod is one
replica of a template, not an object of its own.

The second part prices the whole program as a user meets it: `pulumi preview -s dev` against
`pulumi preview` of a program with one Kubernetes object and one provider in render mode, the
same engine, provider and virtualenv, interleaved. It also prices the program's own imports in a
fresh interpreter, the part of the difference the program controls. Without an engine it says
why and skips.

    .venv/bin/python bench/bench_program.py [--repeat 20] [--stack dev] [--previews 5]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pulumi

REPO = Path(__file__).resolve().parents[1]
# the program, and the mock harness's reading of the stack files as the engine hands them over
sys.path[:0] = [str(REPO), str(REPO / "tests" / "infra"), str(REPO / "tests" / "engine")]

from ddp_infra import config as stack_config  # noqa: E402
from ddp_infra import program  # noqa: E402
from ddp_infra.names import PROJECT  # noqa: E402
from infra_harness import EchoMocks, engine_config, stack_file_config, with_path  # noqa: E402

SIZES = (1, 512)
# The program's warnings (e.g. ReadWriteOnce claims on a multi-node dev world) are part of its
# cost but not of this report: they go to a logger that prints nothing.
QUIET = logging.getLogger("bench_program.engine")
QUIET.addHandler(logging.NullHandler())
QUIET.propagate = False


class RecordingMocks(EchoMocks):
    """The mock harness's mocks (a stack never deployed), recording each resource."""

    def __init__(self) -> None:
        super().__init__()
        self.registered: list[tuple[str, str, dict]] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        self.registered.append((args.typ, args.name, args.inputs))
        return super().new_resource(args)


def evaluate(stack: str, nodes: int) -> tuple[float, list[tuple[str, str, dict]]]:
    """One evaluation of the program (config load + every registration), timed."""
    mocks = RecordingMocks()
    started = time.perf_counter()
    pulumi.runtime.set_mocks(mocks, project=PROJECT, stack=stack, preview=False, logger=QUIET)
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


# The one-resource program the dev preview is priced against: the same runtime, virtualenv and
# provider (render mode, so neither needs a cluster), one object.
ONE_RESOURCE_PROGRAM = {
    "Pulumi.yaml": "name: one-resource\nruntime:\n  name: python\n  options:\n    toolchain: pip\n"
    "    virtualenv: .venv\nstackConfigDir: stacks\n",
    "__main__.py": "import pulumi\nimport pulumi_kubernetes as k8s\n\n"
    'provider = k8s.Provider("k8s", render_yaml_to_directory="rendered", kubeconfig="")\n'
    'k8s.core.v1.Namespace("one", metadata={"name": "one"}, opts=pulumi.ResourceOptions(provider=provider))\n',
    "requirements.txt": (REPO / "requirements.txt").read_text(),
    "stacks/Pulumi.dev.yaml": "config: {}\n",
}
# What each program imports, the Kubernetes API modules its registrations load included (the
# program registers its objects without pulumi-kubernetes' typed classes), timed in a fresh interpreter.
PROGRAM_IMPORTS = {
    "dev": "import ddp_infra.program, ddp_infra.config",
    "one-resource": "import pulumi, pulumi_kubernetes as k8s; k8s.core.v1.Namespace",
}


def import_seconds(statement: str) -> float:
    """Median of 5 fresh interpreters, each timing `statement` (interpreter start not counted)."""
    code = f"import time; t = time.perf_counter(); {statement}; print(time.perf_counter() - t)"
    runs = [
        float(subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout)
        for _ in range(5)
    ]
    return statistics.median(runs)


def engine_previews(repeat: int) -> None:
    """`pulumi preview` of the dev stack against the one-resource program, interleaved."""
    import pytest

    from pulumi_project import PulumiProject

    print()
    with tempfile.TemporaryDirectory(prefix="bench-preview-") as tmp:
        root = Path(tmp)
        one_source = root / "one-resource-source"
        for name, text in ONE_RESOURCE_PROGRAM.items():
            (one_source / name).parent.mkdir(parents=True, exist_ok=True)
            (one_source / name).write_text(text)
        for name in ("ddp_infra", "trainer"):  # the copy expects them; the program imports neither
            (one_source / name).mkdir()
        try:
            projects = {"one-resource": PulumiProject(root / "one", source=one_source), "dev": PulumiProject(root / "dev")}
        except pytest.skip.Exception as skipped:
            print(f"engine preview: skipped, {skipped.msg}")
            return
        for project in projects.values():
            project.init_stack("dev")
            project.run("preview", "--stack", "dev")  # warm-up: plugin and bytecode caches
        times: dict[str, list[float]] = {name: [] for name in projects}
        for _ in range(repeat):
            for name, project in projects.items():
                started = time.perf_counter()
                project.run("preview", "--stack", "dev")
                times[name].append(time.perf_counter() - started)
        steps = {name: project.preview_json("dev")[1]["steps"] for name, project in projects.items()}
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"`pulumi preview -s dev`, {repeat} runs each, interleaved (median, min-max):")
    for name, values in times.items():
        providers = sum(1 for step in steps[name] if step["urn"].split("::")[2].startswith("pulumi:providers:"))
        print(f"  {name:<13} {medians[name]:6.2f} s  ({min(values):.2f}-{max(values):.2f})  "
              f"{len(steps[name])} steps, {providers} provider(s)")  # fmt: skip
    print(f"ratio dev / one-resource: {medians['dev'] / medians['one-resource']:.2f}")
    imports = {name: import_seconds(statement) for name, statement in PROGRAM_IMPORTS.items()}
    print("program imports in a fresh interpreter (median of 5): "
          + ", ".join(f"{name} {seconds * 1000:.0f} ms" for name, seconds in imports.items()))  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--stack", default="dev", choices=("dev", "prod"))
    parser.add_argument("--previews", type=int, default=5, help="engine previews of each program (0: none)")
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
    if args.previews:
        engine_previews(args.previews)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
