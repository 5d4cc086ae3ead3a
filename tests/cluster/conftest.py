"""The session's local Kubernetes cluster (toolchain/cluster.py): started once, stopped at the end,
also when a test fails or the run is interrupted (Ctrl-C, or SIGTERM from CI's time limit)."""

from __future__ import annotations

import signal

import pytest

from toolchain.cluster import LocalCluster


def _interrupt(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.fixture(scope="session")
def cluster():
    # pytest runs finalizers on KeyboardInterrupt only: turn SIGTERM into one.
    previous = signal.signal(signal.SIGTERM, _interrupt)
    local = LocalCluster("test")
    try:
        local.start()
        print(f"\n[cluster] started in {local.startup_seconds:.1f} s")
        yield local
    finally:
        local.stop()
        signal.signal(signal.SIGTERM, previous)
