"""How the suite shares this machine: pytest-xdist runs it in worker processes (`-n` in pytest.ini).

The cluster journeys mostly wait on pods, the trainer's and the engine's tests mostly compute, so
they run side by side. What shares a session fixture runs in one worker, in order: each local
cluster's journeys, the engine's tests (one deployed stack), and each other test file.
The longest units are handed out first.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

# Handed out in this order, the longest first; a suite not named here comes last.
SUITE_ORDER = ("cluster", "trainer", "engine")


def work_unit(item: pytest.Item) -> str:
    """The tests that must run in one worker: those that share a session fixture."""
    path = Path(item.path).relative_to(TESTS)
    suite = path.parts[0] if len(path.parts) > 1 else ""
    if suite == "cluster":
        # every journey of one local cluster; the clusters a test starts itself ("lifecycle") go with
        # the test cluster's, so that no two of them run at once
        return "controllers cluster" if "controllers_cluster" in item.fixturenames else "test cluster"
    if suite == "engine":
        return "engine"  # the deployed dev stack and the API server are the session's
    return str(path)


def suite_rank(item: pytest.Item) -> int:
    suite = Path(item.path).relative_to(TESTS).parts[0]
    return SUITE_ORDER.index(suite) if suite in SUITE_ORDER else len(SUITE_ORDER)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=suite_rank)  # stable: each file keeps its order
    for item in items:
        item.add_marker(pytest.mark.xdist_group(work_unit(item)))


# Lines a session leaves for the run's closing summary (a worker's reach the controller's).
def pytest_configure(config: pytest.Config) -> None:
    config.summary_lines = []


def pytest_sessionfinish(session: pytest.Session) -> None:
    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput["summary_lines"] = session.config.summary_lines


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    node.config.summary_lines += getattr(node, "workeroutput", {}).get("summary_lines", [])


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    for line in config.summary_lines:
        terminalreporter.write_line(line)
