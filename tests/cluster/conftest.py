"""The session's local Kubernetes cluster (toolchain/cluster.py): started once, stopped at the end,
also when a test fails or the run is interrupted (Ctrl-C, or SIGTERM from CI's time limit)."""

from __future__ import annotations

import signal
from contextlib import contextmanager

import pytest

from cluster_testing import DEV, NAMESPACE, TEST_DOMAIN, delete_namespace, deployed_stack
from toolchain import jobset
from toolchain.apiserver import find_tool, tool_dir
from toolchain.cluster import LocalCluster, image_archives


def _interrupt(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


@contextmanager
def _running(local: LocalCluster):
    # pytest runs finalizers on KeyboardInterrupt only: turn SIGTERM into one.
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        local.start()
        print(f"\n[cluster] {local.name} started in {local.startup_seconds:.1f} s")
        yield local
    finally:
        local.stop()
        signal.signal(signal.SIGTERM, previous)


@pytest.fixture(scope="session")
def cluster():
    # Not cluster.local: the stack must not depend on the cluster's domain.
    with _running(LocalCluster("test", domain=TEST_DOMAIN)) as local:
        yield local


def _dev_image(cluster: LocalCluster) -> str:
    """The dev stack names its image `ddp-trainer:dev` (IfNotPresent): give the built image that name."""
    if "trainer" not in cluster.images:
        pytest.fail(f"the trainer image is not built ({image_archives()['trainer'][1]} missing): run toolchain/images.sh")
    name = DEV["image"]["name"]
    reference = name if "/" in name else f"docker.io/library/{name}"
    cluster.tag_image(cluster.images["trainer"], reference)
    return reference


@pytest.fixture(scope="session")
def dev_image(cluster):
    return _dev_image(cluster)


def _require_jobset_manager() -> None:
    """A skip that says why when toolchain/build.sh has not built the JobSet controller here."""
    bin_dir = tool_dir()
    try:
        find_tool(jobset.MANAGER, bin_dir)
    except FileNotFoundError as missing:
        unavailable = bin_dir / "UNAVAILABLE"
        refused = [line for line in unavailable.read_text().splitlines() if line.startswith("jobset:")] if unavailable.exists() else []
        pytest.skip(f"the JobSet controller is not in the toolchain ({unavailable}): {refused[0]}" if refused else str(missing))


@pytest.fixture(scope="session")
def jobset_cluster():
    """A cluster of its own with the JobSet controller. Without the trainer image only the pause
    image is imported: the JobSet's mechanics are tested with it, the trainer's runs fail as the
    other cluster tests do."""
    _require_jobset_manager()
    images = True if image_archives()["trainer"][1].is_file() else ("pause",)
    with _running(LocalCluster("jobset", domain=TEST_DOMAIN, addons=("jobset",), with_images=images)) as local:
        yield local


@pytest.fixture(scope="session")
def jobset_dev_image(jobset_cluster):
    return _dev_image(jobset_cluster)


@contextmanager
def _stack_removed_after(cluster, root):
    """The dev stack on `cluster`, deployed by the real engine where one is on PATH; removed after the
    test, its retained claims and namespace included."""
    stack = deployed_stack(cluster, root)
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
    with _stack_removed_after(cluster, tmp_path / "engine") as stack:
        yield stack


@pytest.fixture
def jobset_stack(jobset_cluster, tmp_path):
    """The dev stack on the JobSet cluster (the test chooses workload.kind and the image)."""
    with _stack_removed_after(jobset_cluster, tmp_path / "engine") as stack:
        yield stack
