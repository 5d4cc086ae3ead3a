"""Fixtures for the trainer's tests."""

from __future__ import annotations

import subprocess

import pytest
from trainer_testing import (
    REPO, Proc, clean_env, done_lines, entrypoint_command, free_port, kill_tree, pod_env, run_to_end, same_result,
)  # fmt: skip


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
        key = tuple(args)
        if key not in cache:
            out = tmp_path_factory.mktemp("reference")
            env = clean_env(**pod_env("ref-0", free_port(), nnodes=1, nproc=2), OUT_DIR=str(out))
            code, text = run_to_end(entrypoint_command(args), env, out / "reference.log", timeout=240)
            assert code == 0, text[-4000:]
            lines = done_lines(text)
            assert len(lines) == 2 and same_result(lines[0]) == same_result(lines[1]), text[-4000:]
            cache[key] = same_result(lines[0])
        return cache[key]

    return result_of
