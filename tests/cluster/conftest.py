"""The session's local Kubernetes cluster (toolchain/cluster.py): started once, stopped at the end,
also when a test fails or the run is interrupted (Ctrl-C, or SIGTERM from CI's time limit)."""

from __future__ import annotations

import signal

import pytest

from cluster_testing import DEV, NAMESPACE, TEST_DOMAIN, delete_namespace, deployed_stack
from toolchain.cluster import LocalCluster


def _interrupt(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.fixture(scope="session")
def cluster():
    # pytest runs finalizers on KeyboardInterrupt only: turn SIGTERM into one.
    previous = signal.signal(signal.SIGTERM, _interrupt)
    # Not cluster.local: the stack must not depend on the cluster's domain.
    local = LocalCluster("test", domain=TEST_DOMAIN)
    try:
        local.start()
        print(f"\n[cluster] started in {local.startup_seconds:.1f} s")
        yield local
    finally:
        local.stop()
        signal.signal(signal.SIGTERM, previous)


@pytest.fixture(scope="session")
def dev_image(cluster):
    """The dev stack names its image `ddp-trainer:dev` (IfNotPresent): give the built image that name."""
    name = DEV["image"]["name"]
    reference = name if "/" in name else f"docker.io/library/{name}"
    cluster.tag_image(cluster.images["trainer"], reference)
    return reference


@pytest.fixture
def dev_stack(cluster, dev_image, tmp_path):
    """The dev stack, brought up and changed by the test (`up` with overrides), by the real engine
    where one is on PATH; removed after, its retained claims and namespace included."""
    stack = deployed_stack(cluster, tmp_path / "engine")
    yield stack
    try:
        stack.destroy()
    finally:
        delete_namespace(cluster, NAMESPACE)
