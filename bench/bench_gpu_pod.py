"""The pod's own path on one GPU (a measurement, not a test; without CUDA it says why and exits 0).

A pod runs the entrypoint, which runs torchrun inside trainer/pod/agent.py: a fork server imports
torch and the trainer once, and each training process is forked from it. On a GPU that is only
sound if nothing in the fork server touches CUDA (a CUDA driver initialised before a fork is
unusable in the child). Here, one pod of one process on the GPU (NCCL), training the loss tests'
run (tests/trainer LONG_ARGS: 64 steps, a checkpoint every 8), as the pod's own command:
  - forked workers (the product) against `--start-method=spawn` (torchrun's own), interleaved:
    seconds from the pod's start to its process group and to its first `[TRAIN]` line, and
    whether both end with the same [DONE] result;
  - the GPU processes seen by nvidia-smi while it trains, by role (the fork server must hold no
    CUDA context: it would cost every pod a context's memory, and its children their GPU);
  - the training process SIGKILLed once step 16 is checkpointed: torchrun forks a new one, which
    resumes; seconds from the kill to the resume and the next `[TRAIN]`, and whether the run ends
    with the uninterrupted run's [DONE] result.
Usage: python bench/bench_gpu_pod.py [--repeats 2]
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "trainer")]
from report import gpu_repeats, print_table  # noqa: E402  bench/report.py: the scripts run with bench/ on sys.path
from trainer_testing import (  # noqa: E402
    LONG_ARGS, Proc, clean_env, descendants, done_lines, entrypoint_command, free_port, kill_tree, pod_env, same_result,
    worker_pids,
)  # fmt: skip

from trainer import contract as c  # noqa: E402
from trainer.pod.fork_server import NAME as FORK_SERVER_NAME  # noqa: E402

SETUPS = {"forked (the product)": [], "spawned (torchrun's own)": ["--start-method=spawn"]}
MARKS = (("process group", "[DDP] process"), ("[TRAIN]", "[TRAIN]"))
RESTARTS = {c.MAX_RESTARTS.name: "2", c.PET_MAX_RESTARTS.name: "2"}


def start(out: Path, options: list[str]) -> Proc:
    env = clean_env(**pod_env("ddp-0", free_port(), nnodes=1, **RESTARTS), OUT_DIR=str(out))
    env.pop("OMP_NUM_THREADS")  # the GPU machine's cores are the pod's
    log = out / f"pod-{time.monotonic_ns()}.log"
    with open(log, "wb") as sink:
        popen = subprocess.Popen(entrypoint_command([*options, *LONG_ARGS]), env=env, cwd=REPO, stdout=sink,
                                 stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    return Proc(popen, log)


def role(pid: int) -> str:
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "gone"
    if comm.startswith("trainer."):
        return comm  # a training process, named after its module
    if comm == FORK_SERVER_NAME:
        return "fork server"  # forked from the agent: the agent's command line
    for module, name in (("multiprocessing.forkserver", "fork server"), ("trainer.pod.agent", "torchrun"), ("trainer.entrypoint", "entrypoint")):
        if module in argv:
            return name
    return argv[:80]


def gpu_processes(pod: Proc) -> list[str]:
    """The pod's processes that hold a CUDA context, by role, with their GPU memory."""
    query = ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"]
    rows = subprocess.run(query, capture_output=True, text=True, timeout=30).stdout.splitlines()
    ours = {pod.pid, *descendants(pod.pid)}
    found = []
    for row in rows:
        pid, memory = (part.strip() for part in row.split(","))
        if pid.isdigit() and int(pid) in ours:
            found.append(f"{role(int(pid))} ({memory})")
    return found or [f"none of the pod's {len(ours)} processes (nvidia-smi: {rows or 'no process'})"]


def wait_until(predicate, pod: Proc, timeout: float, what: str) -> float:
    started = time.monotonic()
    while not predicate():
        if pod.ended() or time.monotonic() - started > timeout:
            raise RuntimeError(f"{what}: {pod.ended() or 'timed out'}\n{pod.text()[-3000:]}")
        time.sleep(0.05)
    return time.monotonic() - started


def uninterrupted(options: list[str], look_at_gpu: bool) -> dict:
    out = Path(tempfile.mkdtemp(prefix="bench-gpu-pod-"))
    pod = start(out, options)
    try:
        seen = {name: wait_until(lambda tag=tag: tag in pod.text(), pod, 300, name) for name, tag in MARKS}
        gpu = gpu_processes(pod) if look_at_gpu else []
        pod.wait(300)
        started = seen["process group"]  # waits run one after another: marks are cumulative
        seen["[TRAIN]"] += started
        lines = done_lines(pod.text())
        return {"marks": seen, "done": same_result(lines[0]) if lines else None, "gpu": gpu, "rc": pod.popen.returncode}
    finally:
        kill_tree(pod.pid)


def worker_killed() -> dict:
    out = Path(tempfile.mkdtemp(prefix="bench-gpu-pod-kill-"))
    pod = start(out, [])
    try:
        checkpoint = out / "run" / "checkpoints" / "ckpt-00000016.json"
        wait_until(checkpoint.exists, pod, 300, "checkpoint of step 16")
        already = len(pod.text())
        killed = worker_pids(pod.pid)
        lost_at = time.monotonic()
        for pid in killed:
            os.kill(pid, signal.SIGKILL)
        seen = {}
        for name, tag in (("resumed", "[CKPT] resumed"), ("[TRAIN]", "[TRAIN]")):
            wait_until(lambda tag=tag: tag in pod.text()[already:], pod, 120, name)
            seen[name] = time.monotonic() - lost_at
        pod.wait(300)
        lines = done_lines(pod.text())
        return {"marks": seen, "done": same_result(lines[0]) if lines else None, "killed": len(killed), "rc": pod.popen.returncode}
    finally:
        kill_tree(pod.pid)


def main() -> None:
    repeats = gpu_repeats(__doc__, "bench_gpu_pod")
    if repeats is None:
        return
    import torch

    runs: dict[str, list[dict]] = {setup: [] for setup in SETUPS}
    for repeat in range(repeats):
        for setup, options in SETUPS.items():
            result = uninterrupted(options, look_at_gpu=repeat == 0)
            runs[setup].append(result)
            print(f"[RUN] {setup}: {result}", flush=True)
    killed = worker_killed()
    print(f"[RUN] worker killed: {killed}", flush=True)

    rows = []
    for setup in SETUPS:
        for name, _ in MARKS:
            value = statistics.median(run["marks"][name] for run in runs[setup])
            rows.append((f"{setup}: pod start to {name}", f"{value:.1f} s"))
    forked, spawned = (statistics.median(run["marks"]["[TRAIN]"] for run in runs[s]) for s in SETUPS)
    rows.append(("to the first [TRAIN], forked vs spawned", f"{forked / spawned:.2f}"))
    results = [run["done"] for setup in SETUPS for run in runs[setup]]
    reference = results[0]
    rows.append(("every uninterrupted run ended with the same [DONE] result", str(reference is not None and all(r == reference for r in results))))
    rows.append(("GPU processes of a forked pod", "; ".join(runs["forked (the product)"][0]["gpu"])))
    rows.append(("GPU processes of a spawned pod", "; ".join(runs["spawned (torchrun's own)"][0]["gpu"])))
    rows += [(f"worker killed at step 16: kill to {name}", f"{value:.1f} s") for name, value in killed["marks"].items()]
    rows.append(("worker killed: ended with the uninterrupted [DONE] result", str(reference is not None and killed["done"] == reference)))
    print_table(f"The pod's path on one GPU (median of {repeats}; {torch.cuda.get_device_name(0)})", rows)


if __name__ == "__main__":
    main()
