"""A controller the proxy refused (toolchain/build.sh's UNAVAILABLE file) skips only the journeys
that need it: the controllers' cluster starts with the others, and the journeys that need none run
there as before. Tested on a tool directory of files, no cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

import conftest
from trainer import contract


@pytest.fixture(autouse=True)
def no_toolchain_on_path(monkeypatch):
    """The managers are looked for on PATH too: only the tool directory of files is seen."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")


def tool_directory(tmp_path: Path, built: tuple[str, ...], refused: tuple[str, ...]) -> Path:
    for name in built:
        manager = tmp_path / conftest.ADDONS[name].manager
        manager.write_text("#!/bin/sh\n")
        manager.chmod(0o755)
    (tmp_path / "UNAVAILABLE").write_text("".join(f"{name}: the proxy answered 410 Gone\n" for name in refused))
    return tmp_path


def test_the_cluster_gets_every_controller_but_a_refused_one(tmp_path):
    bin_dir = tool_directory(tmp_path, built=("jobset", "kueue"), refused=("volcano",))
    assert conftest.available(conftest.CONTROLLERS, bin_dir) == ("jobset", "kueue")
    assert conftest.available(("kueue",), bin_dir) == ("kueue",)


def test_a_controller_neither_built_nor_refused_fails_as_a_setup_not_run(tmp_path):
    bin_dir = tool_directory(tmp_path, built=("jobset",), refused=())
    with pytest.raises(pytest.fail.Exception, match="make setup"):
        conftest.available(("jobset", "kueue"), bin_dir)


@pytest.mark.parametrize(
    "marked, kind, skipped",
    [((), None, False), ((), contract.INDEXED_JOB, False), ((), contract.JOBSET, True), (("volcano",), None, True),
     (("kueue",), contract.INDEXED_JOB, False), (("kueue",), contract.JOBSET, True)],  # fmt: skip
)
def test_a_journey_skips_only_for_the_controllers_it_needs(tmp_path, monkeypatch, marked, kind, skipped):
    """Its `controllers` mark, and JobSet's where it runs as a JobSet; here JobSet and Volcano were refused."""
    bin_dir = tool_directory(tmp_path, built=("kueue",), refused=("jobset", "volcano"))
    monkeypatch.setattr(conftest, "tool_dir", lambda: bin_dir)
    needed = conftest.controllers_needed(marked, {"kind": kind} if kind else {})
    if skipped:
        with pytest.raises(pytest.skip.Exception, match="proxy answered 410"):
            conftest.require_managers(needed)
    else:
        conftest.require_managers(needed)
