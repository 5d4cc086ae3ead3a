"""The agent, its workers' fork server and the store apart leave without tearing their interpreters
down (trainer/pod/quick_exit.py): what they print and the status they end with are as before. The
server, forked from the agent (trainer/pod/fork_server.py), serves its workers as Python's own does."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import textwrap
from pathlib import Path

import pytest
from trainer_testing import PYTHON, REPO, free_port

from trainer.pod.quick_exit import exit_status
from waiting import wait_for

pytestmark = pytest.mark.timeout(60)

# A module whose object says, at the interpreter's teardown, that it was torn down.
TEARDOWN_SENTINEL = """
import os
class _Sentinel:
    def __del__(self, _write=os.write, _open=os.open, _path={path!r}):
        _write(_open(_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND), b"torn down\\n")
sentinel = _Sentinel()
"""


def sentinel_module(where: Path) -> Path:
    """teardown_sentinel.py in `where`, writing to `where`/torn-down at teardown."""
    (where / "teardown_sentinel.py").write_text(TEARDOWN_SENTINEL.format(path=str(where / "torn-down")))
    return where / "torn-down"


def sentinel_env(where: Path, at_start: bool = False) -> dict[str, str]:
    """An env whose Python imports from `where` (and the repository); at_start: every process
    started with it imports the sentinel first (a sitecustomize)."""
    if at_start:
        (where / "sitecustomize.py").write_text("import teardown_sentinel\n")
    return {"PYTHONPATH": f"{where}:{REPO}", "PATH": "/usr/bin:/bin"}


def run_python(code: str, where: Path) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-c", textwrap.dedent(code)], env=sentinel_env(where), cwd=where, capture_output=True, text=True, timeout=50)


@pytest.mark.parametrize(
    "raised, status",
    [(None, 0), (SystemExit(None), 0), (SystemExit(0), 0), (SystemExit(3), 3), (SystemExit("refused: --x"), 1),
     (ValueError("bad"), 1), (KeyboardInterrupt(), 130), (5, 5), ("not a number", 0)],  # fmt: skip
)
def test_the_status_is_the_one_the_interpreter_would_end_with(raised, status, capsys):
    """As `sys.exit(main(args))` ends: what main raised, or the number it returned."""
    def main(args):
        assert args == ["a"]
        if isinstance(raised, BaseException):
            raise raised
        return raised

    assert exit_status(main, ["a"]) == status
    err = capsys.readouterr().err
    if isinstance(raised, SystemExit) and isinstance(raised.code, str):
        assert err.strip() == "refused: --x"
    if isinstance(raised, (ValueError, KeyboardInterrupt)):
        assert "Traceback" in err and type(raised).__name__ in err


def test_leave_runs_the_exit_functions_flushes_and_keeps_the_status_but_skips_the_teardown(tmp_path):
    torn_down = sentinel_module(tmp_path)
    ran = run_python(
        """
        import atexit, sys, teardown_sentinel
        from trainer.pod.quick_exit import exit_status, leave
        atexit.register(lambda: print("exit function ran", file=sys.stderr))
        def main(args):
            sys.stdout.write("buffered, no newline")
            raise SystemExit(7)
        leave(exit_status(main, []))
        """,
        tmp_path,
    )
    assert (ran.returncode, ran.stdout, ran.stderr) == (7, "buffered, no newline", "exit function ran\n")
    assert not torn_down.exists()
    # the control: the same process ending as the interpreter ends it tears the sentinel down
    control = run_python("import teardown_sentinel", tmp_path)
    assert control.returncode == 0 and torn_down.read_text() == "torn down\n"


@pytest.mark.parametrize("product", [True, False])
def test_the_fork_server_leaves_without_teardown_once_its_agent_is_gone(tmp_path, product):
    """The server forked from the agent (trainer/pod/fork_server.py), which imports the preload's
    others itself; Python's own fork server with the same preload (the control) tears its
    interpreter down."""
    torn_down = sentinel_module(tmp_path)
    preload = ["json", "teardown_sentinel"]  # the first imported by the agent, the sentinel by the server only
    start = f"start_forked({preload!r})" if product else f"multiprocessing.set_forkserver_preload({preload!r})"
    ran = run_python(
        f"""
        import multiprocessing, multiprocessing.forkserver as fs
        from trainer.pod.fork_server import start_forked
        {start}
        worker = multiprocessing.get_context("forkserver").Process(target=print, args=("worker ran",))
        worker.start(); worker.join()
        print(open(f"/proc/{{fs._forkserver._forkserver_pid}}/comm").read().strip(), fs._forkserver._forkserver_pid)
        """,
        tmp_path,
    )
    assert ran.returncode == 0 and "worker ran" in ran.stdout, ran.stderr
    name, server = ran.stdout.split()[-2:]
    assert (name == "ddp-fork-server") == product, name
    wait_for(lambda: not Path(f"/proc/{server}").exists() or Path(f"/proc/{server}/stat").read_text().split()[2] == "Z",
             30, "the fork server to end after its parent", not_yet=(FileNotFoundError,))  # fmt: skip
    assert torn_down.exists() != product


def test_the_agent_ends_with_torchruns_status_without_teardown(tmp_path):
    """Arguments torchrun refuses: its usage error's status 2 and message, through the agent's
    leave; the agent imported the sentinel at its start (sitecustomize) and never tore it down."""
    torn_down = sentinel_module(tmp_path)
    ran = subprocess.run([PYTHON, "-m", "trainer.pod.agent", "--nnodes=1"], env=sentinel_env(tmp_path, at_start=True), cwd=tmp_path, capture_output=True, text=True, timeout=50)
    assert ran.returncode == 2 and "agent.py: error: the following arguments are required" in ran.stderr, ran.stderr
    assert not torn_down.exists()


def test_the_store_stops_on_sigterm_with_status_0_without_teardown(tmp_path):
    """The store apart (trainer/pod/rendezvous_store.py), which imported torch for its TCPStore."""
    torn_down = sentinel_module(tmp_path)
    store = subprocess.Popen([PYTHON, "-m", "trainer.pod.rendezvous_store", str(free_port())], env=sentinel_env(tmp_path, at_start=True), cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        assert "[RDZV] store listening on port" in store.stdout.readline()
        store.send_signal(signal.SIGTERM)
        assert store.wait(timeout=30) == 0
        assert "SIGTERM: store on port" in store.stdout.read()
    finally:
        if store.poll() is None:
            store.kill()
            store.wait()
    assert not torn_down.exists()


NESTED = """
import multiprocessing, sys
from trainer.pod.fork_server import start_forked

def nested():
    child = multiprocessing.get_context("forkserver").Process(target=print, args=("nested ran",))
    child.start(); child.join(30)
    sys.exit(child.exitcode)

if __name__ == "__main__":
    start_forked(["json"])
    worker = multiprocessing.get_context("forkserver").Process(target=nested)
    worker.start(); worker.join(40)
    print("worker exit", worker.exitcode)
"""


def test_a_worker_of_the_forked_server_starts_processes_of_its_own(tmp_path):
    """A training process's DataLoader workers use the forkserver context too: the server and its
    workers hold none of the agent's fork-server state (no lock it held, no server of its)."""
    (tmp_path / "nested_probe.py").write_text(NESTED)
    probe = subprocess.Popen([PYTHON, "nested_probe.py"], env=sentinel_env(tmp_path), cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)  # fmt: skip
    try:
        output, _ = probe.communicate(timeout=50)
    finally:  # its server and workers too, however it ended
        with contextlib.suppress(ProcessLookupError):
            os.killpg(probe.pid, signal.SIGKILL)
        probe.wait()
    assert probe.returncode == 0 and "nested ran" in output and "worker exit 0" in output, output
