"""Fixtures for the trainer's tests."""

from __future__ import annotations

import subprocess

import pytest
from trainer_testing import REPO, Proc, kill_tree, uninterrupted_result


@pytest.fixture
def spawn(tmp_path):
    """Start processes with their output in a log file; every one and all its descendants die at the end."""
    started: list[Proc] = []

    def start(args: list[str], env: dict[str, str], name: str) -> Proc:
        log = tmp_path / f"{name}.log"
        with open(log, "wb") as out:
            popen = subprocess.Popen(args, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        proc = Proc(popen, log)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        kill_tree(proc.pid)
        proc.popen.wait(10)


@pytest.fixture(scope="session")
def reference_result(tmp_path_factory):
    """The [DONE] result of an uninterrupted world of 2 processes (one pod, two workers), per args."""
    cache: dict[tuple[str, ...], dict[str, str]] = {}

    def result_of(args: list[str]) -> dict[str, str]:
        if tuple(args) not in cache:
            cache[tuple(args)] = uninterrupted_result(args, tmp_path_factory.mktemp("reference"))
        return cache[tuple(args)]

    return result_of
