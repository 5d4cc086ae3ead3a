"""Pods of a world simulated as torchrun agents on 127.0.0.1, each started by the real entrypoint with
the env the Pulumi program would give it (test_trainer_multinode.py, test_trainer_pod_losses.py)."""

from __future__ import annotations

from waiting import wait_for
from trainer_testing import LONG_ARGS, SMOKE_ARGS, clean_env, done_lines, entrypoint_command, pod_env, same_result, with_option

from trainer import contract as c


def start_pod(spawn, pod_name: str, port: int, out_dir, args=SMOKE_ARGS, **env):
    full_env = clean_env(**pod_env(pod_name, port, **env), OUT_DIR=str(out_dir))
    return spawn(entrypoint_command(args), full_env, pod_name)


def rank_0_text(*pods) -> str:
    """The pods' logs together, for the lines only rank 0 writes ([TRAIN], [EPOCH], [CKPT]). On
    loopback every pod advertises 127.0.0.1, so torchrun's rendezvous numbers the agents by pid: the
    torchrun started first, unless the pid counter wrapped in between (pid_max is 32768 here)."""
    return "".join(pod.text() for pod in pods)


RESTARTS = {c.MAX_RESTARTS.name: "2", c.PET_MAX_RESTARTS.name: "2"}
# LONG_ARGS made long enough for a replacement to start and join as a spare before the run ends.
SPARE_RUN = with_option(LONG_ARGS, "--epochs", "6")


def two_pods_past_step_16(spawn, tmp_path, port: int, args=LONG_ARGS, **env):
    """A world of two pods of LONG_ARGS (or `args`), with world restarts allowed, once it has checkpointed step 16."""
    first = start_pod(spawn, "ddp-0", port, tmp_path, args, **RESTARTS, **env)
    second = start_pod(spawn, "ddp-1", port, tmp_path, args, **RESTARTS, **env)
    wait_for_file(tmp_path / "run" / "checkpoints" / "ckpt-00000016.json", (first, second), timeout=180)
    return first, second


def results_of(*procs) -> list[dict[str, str]]:
    return [line for proc in procs for line in done_lines(proc.text())]


def assert_both_ranks_end_with(procs, expected: dict[str, str]) -> None:
    lines = results_of(*procs)
    assert sorted(line["rank"] for line in lines) == ["0", "1"], "each rank reports its [DONE] line"
    assert [same_result(line) for line in lines] == [expected, expected]


def wait_for_file(path, proc_list, timeout: float) -> None:
    def ended() -> str | None:
        return next((f"{proc.ended()}:\n{proc.text()[-4000:]}" for proc in proc_list if proc.ended()), None)

    wait_for(path.exists, timeout, path.name, interval=0.02, gone=ended)


