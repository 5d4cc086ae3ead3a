"""How the suite shares this machine: pytest-xdist runs it in worker processes (`-n` in pytest.ini).

The cluster journeys mostly wait on pods, the trainer's and the engine's tests mostly compute, so
they run side by side. What shares a session fixture runs in one worker, in order: each local
cluster's journeys, the engine's tests (one deployed stack), and each other test file.
The longest units are handed out first.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling

TESTS = Path(__file__).resolve().parent

# Handed out in this order, the longest first; a suite not named here comes last.
SUITE_ORDER = ("cluster", "trainer", "engine")
# The cluster test files whose journeys run on the controllers' cluster (the `controllers_cluster`
# fixture); the others share the test cluster, and the clusters a test starts itself ("lifecycle")
# go with them, so that no two of those run at once. Checked against the fixtures at collection.
CONTROLLERS_CLUSTER_FILES = (
    "test_cluster_disruption.py", "test_cluster_elastic_jobset.py", "test_cluster_faults.py", "test_cluster_fit.py", "test_cluster_hang_watch.py", "test_cluster_jobset.py", "test_cluster_kueue.py",
    "test_cluster_volcano.py", "test_cluster_waiting.py",
)  # fmt: skip
# ...and those on the cluster whose control plane runs the Workload API and its gang scheduling
# (`workload_api_cluster`), off by default on a cluster.
WORKLOAD_API_CLUSTER_FILES = ("test_cluster_workload_api.py",)
# ...and those on the cluster of three nodes (`nodes_cluster`): the world across nodes, a lost pod or node.
# Handed out after the Workload API's cluster (pause pods but in its last journey): started beside
# the test and controllers' clusters, its image import and training slowed the controllers' first
# journey past its 300 s (a crash-looping pod's eviction, 116 s with the light cluster beside it).
NODES_CLUSTER_FILES = ("test_cluster_nodes.py",)
# The trainer's longest files (several minutes each, real torchrun worlds): handed out first among
# the trainer's units, with the engine's (5 minutes, one deployed stack), so that the run ends on a
# short one. Handed out in file order, the 19 tests these two files split started 25 minutes into a
# 35-minute run, as one file, and ended it; handed out after the trainer's, the engine's ended a
# 35-minute run 2.5 minutes after the other workers.
LONGEST_TRAINER_FILES = ("test_trainer_multinode.py", "test_trainer_pod_losses.py")
# Each cluster fixture and the work unit whose tests use it.
CLUSTER_FIXTURES = {"controllers_cluster": "controllers cluster", "workload_api_cluster": "workload-api cluster", "nodes_cluster": "nodes cluster"}


def work_unit(nodeid: str) -> str:
    """The tests that must run in one worker, in order: those that share a session fixture. The
    controller decides from the test's id alone."""
    parts = Path(nodeid.split("::", 1)[0]).parts  # ("tests", suite, file) or ("tests", file)
    suite = parts[1] if len(parts) > 2 else ""
    if suite == "cluster":
        if parts[-1] in WORKLOAD_API_CLUSTER_FILES:
            return "workload-api cluster"
        if parts[-1] in NODES_CLUSTER_FILES:
            return "nodes cluster"
        return "controllers cluster" if parts[-1] in CONTROLLERS_CLUSTER_FILES else "test cluster"
    if suite == "engine":
        return "engine"  # the deployed dev stack and the API server are the session's
    return "/".join(parts)


class WorkUnitScheduling(LoadScopeScheduling):
    """xdist's scope scheduling, with work_unit as the scope."""

    def _split_scope(self, nodeid: str) -> str:
        return work_unit(nodeid)


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    return WorkUnitScheduling(config, log)


def suite_rank(item: pytest.Item) -> float:
    suite = Path(item.path).relative_to(TESTS).parts[0]
    if Path(item.path).name in NODES_CLUSTER_FILES:
        return SUITE_ORDER.index("cluster") + 0.5  # the last cluster unit handed out
    if Path(item.path).name in LONGEST_TRAINER_FILES or suite == "engine":
        return SUITE_ORDER.index("trainer") - 0.25
    return SUITE_ORDER.index(suite) if suite in SUITE_ORDER else len(SUITE_ORDER)


@pytest.fixture(scope="session")
def installed_example(tmp_path_factory) -> Path:
    """A directory holding examples/shapes as pip installs it in its image (trainer_testing.install_example):
    on a process's PYTHONPATH, its task is found by its entry point's name."""
    from trainer_testing import install_example

    return install_example(tmp_path_factory.mktemp("shapes"), tmp_path_factory.mktemp("site"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=suite_rank)  # stable: each file keeps its order
    misplaced = [
        item.nodeid for item in items
        if any(fixture in item.fixturenames and work_unit(item.nodeid) != unit for fixture, unit in CLUSTER_FIXTURES.items())
        or (work_unit(item.nodeid) in CLUSTER_FIXTURES.values()
            and not any(fixture in item.fixturenames for fixture, unit in CLUSTER_FIXTURES.items() if unit == work_unit(item.nodeid)))
    ]  # fmt: skip
    if misplaced:
        raise pytest.UsageError(f"tests/conftest.py's cluster file lists disagree with these tests' cluster fixture: {misplaced}")


# Lines a session leaves for the run's closing summary (a worker's reach the controller's).
def pytest_configure(config: pytest.Config) -> None:
    config.summary_lines = []
    if not hasattr(config, "workerinput"):
        _processes_tmp(config)


def _processes_tmp(config: pytest.Config) -> None:
    """The temporary files of every process the run starts go into one directory, removed at its end:
    torchrun leaves a directory of its workers' logs (torchelastic_*) and Python's fork server one of
    its socket (pymp-*) in TMPDIR, more than a thousand a run. pytest's own (its basetemp, kept for
    the last three runs) stays where it was."""
    tempfile.gettempdir()  # this process's temporary directory, fixed before TMPDIR changes
    config.processes_tmp = tempfile.mkdtemp(prefix="ddp-infra-tests-")
    os.environ["TMPDIR"] = config.processes_tmp


def pytest_unconfigure(config: pytest.Config) -> None:
    if processes_tmp := getattr(config, "processes_tmp", None):
        shutil.rmtree(processes_tmp, ignore_errors=True)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput["summary_lines"] = session.config.summary_lines


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    node.config.summary_lines += getattr(node, "workeroutput", {}).get("summary_lines", [])


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    for line in config.summary_lines:
        terminalreporter.write_line(line)
