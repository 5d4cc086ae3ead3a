"""The entrypoint as the container runs it: `python -m trainer.entrypoint <torchrun args>`."""

from __future__ import annotations

import os
import signal
import subprocess
import urllib.error
import urllib.request

import pytest
from trainer_testing import PYTHON, REPO, SMOKE_ARGS, clean_env, descendants, free_port, kill_tree, pod_env

from trainer import contract as c

pytestmark = pytest.mark.timeout(60)


def run_entrypoint(env: dict[str, str], args: list[str] = SMOKE_ARGS) -> subprocess.CompletedProcess:
    command = [PYTHON if part == "python" else part for part in c.ENTRYPOINT_COMMAND]
    return subprocess.run([*command, *args], env=clean_env(**env), cwd=REPO, capture_output=True, text=True, timeout=60)


def test_a_broken_env_is_refused_with_every_problem_listed():
    env = pod_env("ddp-1", 29500, **{c.WORLD_SIZE.name: "3", c.RDZV_BACKEND.name: "zookeeper"})
    del env[c.MASTER_ADDR.name]
    result = run_entrypoint(env)
    assert result.returncode == c.EXIT_BAD_ENV
    assert "[DDP] cannot start" in result.stderr
    for name in (c.WORLD_SIZE.name, c.RDZV_BACKEND.name, c.MASTER_ADDR.name):
        assert f"  - {name}:" in result.stderr
    assert "[DDP] torchrun" not in result.stdout


def test_an_empty_env_names_the_contract_variables():
    result = run_entrypoint({})
    assert result.returncode == c.EXIT_BAD_ENV
    assert all(f"  - {name}:" in result.stderr for name in c.REQUIRED)


def test_user_args_that_contradict_the_world_are_refused():
    result = run_entrypoint(pod_env("ddp-0", free_port()), ["--nproc-per-node=8", *SMOKE_ARGS])
    assert result.returncode == c.EXIT_BAD_ENV
    assert "--nproc-per-node" in result.stderr


def test_a_master_that_never_listens_fails_the_preflight_with_advice():
    env = pod_env("ddp-1", free_port(), **{c.MASTER_WAIT_TIMEOUT.name: "2"})
    result = run_entrypoint(env)
    assert result.returncode == c.EXIT_PREFLIGHT_FAILED
    assert result.stdout.startswith("[DDP] pod_index=1 nnodes=2 nproc_per_node=1 world_size=2 master=127.0.0.1:")
    assert "[PREFLIGHT] FAIL reach 127.0.0.1" in result.stdout and "next:" in result.stdout
    assert "not starting torchrun" in result.stderr


def test_seed000_variables_alone_reach_the_preflight():
    env = {"POD_NAME": "trainer-1", "SVC_NAME": "svc", "POD_NUMS": "2", "POD_PORT": "23456", "POD_NAMESPACE": "ns",
           c.MASTER_WAIT_TIMEOUT.name: "1"}  # fmt: skip
    result = run_entrypoint(env)
    assert result.returncode == c.EXIT_PREFLIGHT_FAILED
    assert "master=trainer-0.svc:23456" in result.stdout
    assert "DNS lookup still failing" in result.stdout


def _started(env: dict[str, str], args: list[str], as_pid_1: bool = False) -> subprocess.Popen:
    command = [PYTHON if part == "python" else part for part in c.ENTRYPOINT_COMMAND]
    # In a PID namespace of its own the entrypoint is PID 1, as in a container: the kernel then
    # delivers a signal from outside only if the process handles it.
    prefix = ["unshare", "--pid", "--fork", "--kill-child"] if as_pid_1 else []
    # A session of its own, so that kill_tree ends torchrun and the workers with it, whatever fails.
    return subprocess.Popen([*prefix, *command, *args], env=clean_env(**env), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip


def _wait_for_line(stream, text: str) -> str:
    seen = ""
    for line in stream:
        seen += line
        if text in line:
            return seen
    raise AssertionError(f"{text!r} never printed:\n{seen}")


@pytest.mark.skipif(os.geteuid() != 0, reason="a PID namespace (the container's PID 1) needs root")
def test_sigterm_while_waiting_for_the_master_ends_the_pod_at_once():
    # Pod 1 waits up to an hour for a master that never listens; SIGTERM must not wait with it.
    env = pod_env("ddp-1", free_port(), **{c.MASTER_WAIT_TIMEOUT.name: "3600"})
    proc = _started(env, SMOKE_ARGS, as_pid_1=True)
    try:
        _wait_for_line(proc.stdout, "[DDP] pod_index=1")
        (entrypoint,) = descendants(proc.pid)
        os.kill(entrypoint, signal.SIGTERM)
        proc.wait(timeout=60)  # a hang guard: the wait it must cut short is an hour
    finally:
        kill_tree(proc.pid)
        proc.wait()
    assert proc.returncode == c.EXIT_TERMINATED
    assert "SIGTERM while no torchrun ran" in proc.stderr.read()


def _answer(port: int, path: str = c.LIVENESS_PATH) -> tuple[int, str] | None:
    """The kubelet's httpGet probe as it sees it: (status, body), or None where nothing answered in 2 s."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()
    except (TimeoutError, urllib.error.URLError):
        return None


def test_the_entrypoint_answers_the_liveness_probe_while_it_runs_and_not_while_it_is_frozen():
    """From its start, the preflight's long wait included; a frozen pod (every process stopped) answers
    nothing, which is how the kubelet tells it from a pod that waits."""
    port = free_port()
    env = pod_env("ddp-1", free_port(), **{c.MASTER_WAIT_TIMEOUT.name: "3600", c.LIVENESS_PORT.name: str(port)})
    proc = _started(env, SMOKE_ARGS)
    try:
        _wait_for_line(proc.stdout, "[DDP] pod_index=1")
        assert _answer(port) == (200, "alive\n")
        assert _answer(port, "/metrics")[0] == 404
        os.killpg(proc.pid, signal.SIGSTOP)
        assert _answer(port) is None  # the kernel took the connection; no process answers on it
        os.killpg(proc.pid, signal.SIGCONT)
        assert _answer(port) == (200, "alive\n")
    finally:
        kill_tree(proc.pid)
        proc.wait()


def test_a_liveness_port_that_is_no_port_is_refused_before_anything_starts():
    result = run_entrypoint(pod_env("ddp-1", free_port(), **{c.LIVENESS_PORT.name: "70000"}))
    assert result.returncode == c.EXIT_BAD_ENV
    assert "LIVENESS_PORT" in result.stderr and "70000" in result.stderr, result.stderr


# A worker that, on SIGTERM, needs `seconds` to write its checkpoint (a marker file).
SLOW_CHECKPOINT = """
import os, signal, sys, time
marker, seconds = sys.argv[1], float(sys.argv[2])
def stop(signum, frame):
    time.sleep(seconds)
    open(marker, "w").write("checkpoint")
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
print("worker ready", flush=True)
time.sleep(600)
"""


# The worker needs 6 s to checkpoint: a minute is plenty, a second is not, however busy the machine.
@pytest.mark.parametrize("shutdown_timeout, written", [(60, True), (1, False)])
def test_torchrun_gives_workers_the_shutdown_timeout_of_the_pod_env(tmp_path, shutdown_timeout, written):
    """torchrun's own default is 30 s whatever the grace period: the entrypoint passes the pod's."""
    script, marker = tmp_path / "worker.py", tmp_path / "checkpoint"
    script.write_text(SLOW_CHECKPOINT)
    env = pod_env("ddp-0", free_port(), nnodes=1, **{c.SHUTDOWN_TIMEOUT.name: str(shutdown_timeout)})
    proc = _started(env, [str(script), str(marker), "6"])
    try:
        _wait_for_line(proc.stdout, "worker ready")
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    finally:
        kill_tree(proc.pid)
        proc.wait()
    assert marker.exists() is written


def run_fork_probe(status: int) -> tuple[subprocess.CompletedProcess, list[str]]:
    probe = REPO / "tests" / "trainer" / "fork_probe.py"
    result = run_entrypoint(pod_env("solo-0", free_port(), nnodes=1, nproc=2), [str(probe), str(status)])
    return result, [line for line in result.stdout.splitlines() if line.startswith("[FORK]")]


def test_workers_are_forked_from_a_server_that_has_imported_torch():
    """A worker (and every worker of a restarted world) starts with torch in memory, torch._dynamo
    too (DDP's constructor and an optimizer's first step import it: a CPU-second in each worker),
    the objects it inherits frozen out of its garbage collections' way: forked from the fork
    server the agent forked, and named after its script."""
    result, forks = run_fork_probe(0)
    assert sorted(line.split()[1] for line in forks) == ["rank=0", "rank=1"], result.stdout + result.stderr
    for line in forks:
        frozen = int(line.split(" frozen=", 1)[1].split()[0])
        assert frozen > 100_000, line  # torch's and torch._dynamo's objects: about 350,000
        line = line.replace(f" frozen={frozen}", "")
        assert "dynamo_before=True torch_before=True name=fork_probe.py argv=['0'] parent_name=ddp-fork-server parent=" in line, line
        assert "-m trainer.pod.agent " in line.split(" parent=", 1)[1], line  # the agent's command line: forked from it
    assert result.returncode == 0, result.stderr[-3000:]


def test_a_forked_workers_exit_status_reaches_torchrun():
    result, forks = run_fork_probe(3)
    assert forks, result.stdout + result.stderr
    assert result.returncode != 0 and "exitcode  : 3" in result.stderr, result.stderr[-3000:]
