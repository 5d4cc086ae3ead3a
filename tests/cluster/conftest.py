"""The session's local Kubernetes clusters (toolchain/cluster/): each started once, stopped once this
process has no cluster journey left, also when a test fails or the run is interrupted (Ctrl-C, or
SIGTERM from CI's time limit: see tests/interruption.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager

import pytest
import yaml

from cluster_testing import DEV, ENGINE_COMMANDS, REPO, NAMESPACE, TEST_DOMAIN, EngineStack, delete_namespace, pause_stack as paused, pod_reference_result
from pulumi_project import installed_plugins, provider_versions, toolchain_path
from refusals import refusal
from toolchain.apiserver import find_tool, tool_dir
from toolchain.cluster import ADDONS, LocalCluster, image_archives
from toolchain.cluster.containerd import image_reference
from trainer import contract


# The session fixtures' clusters this process started that still run.
RUNNING: dict[str, LocalCluster] = {}


@contextmanager
def _running(local: LocalCluster):
    try:
        RUNNING[local.name] = local
        local.start()
        print(f"\n[cluster] {local.name} started in {local.startup_seconds:.1f} s")
        yield local
    finally:
        if RUNNING.pop(local.name, None):
            local.stop()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Once this process's next test is not a cluster journey, its clusters stop: the units of work
    give a process a cluster's journeys together, before the other suites (tests/conftest.py), and
    an idle cluster's control plane and controllers took CPU from every test after them until the
    session ended. Runs after the test's own fixtures are torn down (a stack removed from a cluster
    needs it running)."""
    if nextitem is None or Path(nextitem.path).parent != Path(item.path).parent:
        for name in list(RUNNING):
            RUNNING.pop(name).stop()


@pytest.fixture(scope="session")
def cluster():
    # Not cluster.local: the stack must not depend on the cluster's domain.
    with _running(LocalCluster("test", domain=TEST_DOMAIN, with_images=("trainer", "shapes"))) as local:
        yield local


def _named_image(cluster: LocalCluster, built: str, name: str) -> str:
    """Gives the image images.sh built as `built` the name a stack gives it (pulled IfNotPresent)."""
    if built not in cluster.images:
        pytest.fail(f"the {built} image is not built ({image_archives()[built][1]} missing): run toolchain/images.sh")
    reference = image_reference(name)
    cluster.tag_image(cluster.images[built], reference)
    return reference


def _dev_image(cluster: LocalCluster) -> str:
    """The dev stack names its image `ddp-trainer:dev`."""
    return _named_image(cluster, "trainer", DEV["image"]["name"])


@pytest.fixture(scope="session")
def dev_image(cluster):
    return _dev_image(cluster)


@pytest.fixture(scope="session")
def shapes_image(cluster):
    """The example project's image (examples/shapes, built FROM the trainer's) under the name its stack
    file gives it; returns that name."""
    name = yaml.safe_load((REPO / "examples" / "shapes" / "Pulumi.shapes.yaml").read_text())["config"]["ddp-infra:image"]["name"]
    _named_image(cluster, "shapes", name)
    return name


CONTROLLERS = ("jobset", "kueue", "volcano")


def _unavailable(names: tuple[str, ...], bin_dir: Path | None = None) -> str | None:
    """Why a controller is not in the toolchain, where toolchain/build.sh proved it cannot be built
    here (its UNAVAILABLE file quotes the proxy's answer); a controller missing otherwise fails."""
    bin_dir = bin_dir or tool_dir()
    for name in names:
        try:
            find_tool(ADDONS[name].manager, bin_dir)
        except FileNotFoundError as missing:
            if said := refusal(name, bin_dir):
                return f"the {name} controller is not in the toolchain ({said})"
            pytest.fail(f"{missing}: run `make setup` (toolchain/build.sh)", pytrace=False)
    return None


def available(names: tuple[str, ...], bin_dir: Path | None = None) -> tuple[str, ...]:
    """The controllers of `names` a cluster starts with: all but those the proxy refused (_unavailable)."""
    bin_dir = bin_dir or tool_dir()
    return tuple(name for name in names if _unavailable((name,), bin_dir) is None)


def require_managers(names: tuple[str, ...] = CONTROLLERS) -> None:
    """A skip only where a controller cannot be built here (_unavailable)."""
    if reason := _unavailable(names):
        pytest.skip(reason)


def controllers_needed(marked: tuple[str, ...], params: dict) -> tuple[str, ...]:
    """The controllers a journey needs: its `controllers` mark's, and JobSet's where it runs as a JobSet."""
    return marked + (("jobset",) if params.get("kind") == contract.JOBSET else ())


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A journey skips for the controllers it needs alone, before its fixtures start anything: the
    clusters start without a refused one, and the journeys that need none run as before."""
    marker = item.get_closest_marker("controllers")
    callspec = getattr(item, "callspec", None)
    needed = controllers_needed(tuple(marker.args) if marker else (), callspec.params if callspec else {})
    if needed:
        require_managers(needed)


@pytest.fixture(scope="session")
def controllers_cluster():
    """A cluster of its own with the JobSet and Kueue controllers and Volcano's scheduler. Without the
    trainer image only the pause image is imported: the controllers' mechanics are tested with it,
    the trainer's runs fail as the other cluster tests do."""
    images = True if image_archives()["trainer"][1].is_file() else ("pause",)
    # Named "jobset" as it was before it ran Kueue too: its image store is kept under that name.
    with _running(LocalCluster("jobset", domain=TEST_DOMAIN, addons=available(CONTROLLERS), with_images=images)) as local:
        yield local


# The nodes' cluster's racks, as a topology level: nodes 0 and 1 in one, node 2 in the other.
RACK = "ddp-infra.test/rack"
RACKS = {0: {RACK: "rack-a"}, 1: {RACK: "rack-a"}, 2: {RACK: "rack-b"}}


@pytest.fixture(scope="module")
def nodes_cluster():
    """A cluster of three nodes, each advertising a third of the machine (node 0 shares the control
    plane's namespace), in two racks, with the Kueue controller for a topology of racks: the
    journeys across nodes and a node's faults. One module uses it: it stops once that module's
    journeys end, not at the end of the worker's session."""
    with _running(LocalCluster("nodes", domain=TEST_DOMAIN, nodes=3, node_labels=RACKS, addons=available(("kueue",)))) as local:
        yield local


@pytest.fixture(scope="module")
def nodes_dev_image(nodes_cluster):
    return _dev_image(nodes_cluster)


@pytest.fixture
def nodes_stack(nodes_cluster, nodes_dev_image, tmp_path):
    """The dev stack on the nodes' cluster."""
    yield from _stack(nodes_cluster, tmp_path / "engine")


@pytest.fixture
def nodes_pause_stack(nodes_cluster, tmp_path):
    """The dev stack on the nodes' cluster with the pause binary in place of the trainer."""
    yield from _stack(nodes_cluster, tmp_path / "engine", pause=True)


@pytest.fixture(scope="module")
def workload_api_cluster():
    """A cluster whose control plane runs the Workload API and its gang scheduling, with the JobSet
    controller and the trainer image. One module uses it: it stops once that module's journeys
    end, and idles no control plane for the rest of the run."""
    with _running(LocalCluster("workload-api", domain=TEST_DOMAIN, addons=available(("jobset",)), with_images=("trainer",), workload_api=True)) as local:
        yield local


@pytest.fixture
def workload_api_pause_stack(workload_api_cluster, tmp_path):
    """The dev stack on the Workload API's cluster with the pause binary in place of the trainer."""
    yield from _stack(workload_api_cluster, tmp_path / "engine", pause=True)


@pytest.fixture
def workload_api_stack(workload_api_cluster, tmp_path):
    """The dev stack on the Workload API's cluster."""
    _dev_image(workload_api_cluster)
    yield from _stack(workload_api_cluster, tmp_path / "engine")


@pytest.fixture(scope="session")
def controllers_dev_image(controllers_cluster):
    return _dev_image(controllers_cluster)


def _stack(cluster, root: Path, *, pause: bool = False):
    """The dev stack on `cluster` (with `pause`, the pause binary in place of the trainer), removed
    after the test: `pulumi destroy`, then its retained claims and namespace."""
    stack = paused(cluster, root) if pause else EngineStack(cluster, root)
    try:
        yield stack
    finally:
        try:
            stack.destroy()
        finally:
            delete_namespace(cluster, NAMESPACE)


@pytest.fixture
def dev_stack(cluster, dev_image, tmp_path):
    """The dev stack, brought up and changed by the test (`up` with overrides)."""
    yield from _stack(cluster, tmp_path / "engine")


@pytest.fixture
def controllers_stack(controllers_cluster, tmp_path):
    """The dev stack on the controllers' cluster (the test chooses workload.kind and the image)."""
    yield from _stack(controllers_cluster, tmp_path / "engine")


@pytest.fixture
def pause_stack(controllers_cluster, tmp_path):
    """The dev stack on the controllers' cluster with the pause binary in place of the trainer."""
    yield from _stack(controllers_cluster, tmp_path / "engine", pause=True)


@pytest.fixture(scope="session")
def reference_result(tmp_path_factory):
    """Starts computing what an uninterrupted world ends with (pod_reference_result) beside the
    journeys, whose pods mostly wait; returns its future. Each run is computed once a session:
    `--pg-timeout` only bounds waits and `--batch-seconds` only paces, so runs that differ in them
    share one, computed without a wait."""
    futures: dict[tuple, Future] = {}

    def start(args: list[str], **env: str) -> Future:
        """`env`: what the run's processes also get (a PYTHONPATH where a task of one's own is installed)."""
        args = _without_option(_without_option(args, "--pg-timeout"), "--batch-seconds")
        key = (tuple(args), tuple(sorted(env.items())))
        if key not in futures:
            futures[key] = background.submit(pod_reference_result, args, tmp_path_factory.mktemp("reference"), **env)
        return futures[key]

    with ThreadPoolExecutor(max_workers=1) as background:
        yield start


def _without_option(args: list[str], option: str) -> list[str]:
    if option not in args:
        return args
    at = args.index(option)
    return args[:at] + args[at + 2 :]


def pytest_sessionfinish(session):
    """Says, in every run's output, that the journeys went through the real engine, and which."""
    if not ENGINE_COMMANDS:
        return
    env = {**os.environ, "PATH": toolchain_path()}
    pulumi = shutil.which("pulumi", path=env["PATH"])
    cli = subprocess.run([pulumi, "version"], env=env, capture_output=True, text=True, timeout=60)
    provider = provider_versions(installed_plugins(pulumi, env))
    session.config.summary_lines.append(
        f"cluster journeys through the real engine (pulumi {cli.stdout.strip()} at {pulumi}, kubernetes provider {', '.join(provider)}): "
        + engine_commands_said(ENGINE_COMMANDS)
    )


def engine_commands_said(commands: list[tuple[str, str]]) -> str:
    """`on test: 3 pulumi up, 1 pulumi refresh, 2 pulumi destroy; on nodes: …`, each cluster in the order it first ran one."""
    clusters = list(dict.fromkeys(cluster for cluster, _ in commands))
    counted = {cluster: Counter(command for on, command in commands if on == cluster) for cluster in clusters}
    return "; ".join(f"on {cluster}: " + ", ".join(f"{n} `pulumi {command}`" for command, n in counted[cluster].items()) for cluster in clusters)
