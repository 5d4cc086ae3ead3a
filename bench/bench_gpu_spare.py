"""What a spare pod saves on a GPU once a pod is lost (a measurement, not a test; without CUDA it
says why and exits 0).

On the local cluster a spare takes a lost pod's place without the Job controller's back-off; the
rest of the resume is the new worker's own start: its CUDA context, NCCL, the checkpoint read, and
the first steps. Only a GPU shows that part. Here, on one GPU, a world of one pod (one process,
NCCL) whose rendezvous store runs apart, as `rendezvous.store: own-pod` runs it, trains the smoke
model; once it has checkpointed, the training pod is SIGKILLed whole, and the world resumes:
  - with a spare (SPARE_PODS=1: a second pod that waits in the rendezvous, its torchrun and fork
    server already up), which takes the lost pod's place;
  - without one: a new pod is started the moment the old one is lost (what the Job controller
    does after its back-off, 10 s and doubling, left out here).
Seconds from the loss to the resume from the checkpoint (`[CKPT] resumed`) and to the first
`[TRAIN]` line after it, interleaved, each case `--repeats` times.
Usage: python bench/bench_gpu_spare.py [--repeats 2]
"""

from __future__ import annotations

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
    LONG_ARGS, Proc, clean_env, entrypoint_command, free_port, kill_tree, pod_env, store_at, store_command, worker_pids,
)  # fmt: skip

from trainer import contract as c  # noqa: E402

# The smoke run made long enough that it never ends while measured: checkpoints every 32 steps.
RUN_ARGS = [*LONG_ARGS[: LONG_ARGS.index("--epochs") + 1], "400", *LONG_ARGS[LONG_ARGS.index("--epochs") + 2 :]]
RUN_ARGS[RUN_ARGS.index("--checkpoint-every") + 1] = "32"
RESTARTS = {c.MAX_RESTARTS.name: "2", c.PET_MAX_RESTARTS.name: "2"}
MARKS = (("resumed", "[CKPT] resumed"), ("[TRAIN]", "[TRAIN]"))


def spawn(command: list[str], env: dict[str, str], log: Path) -> Proc:
    env = {k: v for k, v in env.items() if k != "OMP_NUM_THREADS"}  # the GPU machine's cores are the pod's
    with open(log, "wb") as sink:
        popen = subprocess.Popen(command, env=env, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    return Proc(popen, log)


def wait_until(predicate, procs: list[Proc], timeout: float, what: str) -> float:
    started = time.monotonic()
    while not predicate():
        ended = [p.ended() for p in procs if p.ended()]
        if ended or time.monotonic() - started > timeout:
            raise RuntimeError(f"{what}: {ended or 'timed out'}\n" + "\n".join(p.text()[-2000:] for p in procs))
        time.sleep(0.05)
    return time.monotonic() - started


def lose_a_pod(with_spare: bool) -> dict[str, float]:
    out = Path(tempfile.mkdtemp(prefix="bench-gpu-spare-"))
    store_port, port = free_port(), free_port()
    store = spawn(store_command(str(store_port)), clean_env(), out / "store.log")
    extra = {**store_at(store_port), **RESTARTS, **({c.SPARE_PODS.name: "1"} if with_spare else {})}

    def pod(index: int) -> Proc:
        env = clean_env(**pod_env(f"ddp-{index}", port, nnodes=1, kind=c.INDEXED_JOB, **{c.JOB_COMPLETION_INDEX: str(index)}, **extra),
                        OUT_DIR=str(out))  # fmt: skip
        return spawn(entrypoint_command(RUN_ARGS), env, out / f"pod-{index}-{time.monotonic_ns()}.log")

    procs = [store]
    try:
        wait_until(lambda: f"[RDZV] store listening on port {store_port}" in store.text(), procs, 60, "the store")
        pods = [pod(index) for index in range(2 if with_spare else 1)]
        procs += pods
        wait_until((out / "run" / "checkpoints" / "ckpt-00000032.json").exists, procs, 300, "the checkpoint of step 32")
        (training,) = [p for p in pods if worker_pids(p.pid)]
        if with_spare:
            (waiting,) = [p for p in pods if p is not training]
            wait_until(lambda: "wait as spares" in waiting.text(), procs, 60, "the spare waiting")
        lost_at = time.monotonic()
        kill_tree(training.pid)
        training.popen.wait(10)
        procs.remove(training)
        successor = waiting if with_spare else pod(0)
        procs.append(successor)
        already = len(successor.text()) if with_spare else 0
        seen = {}
        for name, tag in MARKS:
            wait_until(lambda tag=tag: tag in successor.text()[already:], procs, 300, name)
            seen[name] = time.monotonic() - lost_at
        return seen
    finally:
        for proc in procs:
            kill_tree(proc.pid)


def main() -> None:
    repeats = gpu_repeats(__doc__, "bench_gpu_spare")
    if repeats is None:
        return
    import torch

    cases = {"a spare takes its place": True, "a new pod at once": False}
    runs: dict[str, list[dict[str, float]]] = {case: [] for case in cases}
    for repeat in range(repeats):
        for case, with_spare in cases.items():
            runs[case].append(lose_a_pod(with_spare))
            print(f"[run {repeat + 1}] {case}: " + ", ".join(f"{k} {v:.1f} s" for k, v in runs[case][-1].items()), flush=True)
    rows = []
    for name, _ in MARKS:
        spare, fresh = (statistics.median(run[name] for run in runs[case]) for case in cases)
        rows += [(f"loss to {name}: {case}", f"{value:.1f} s") for case, value in zip(cases, (spare, fresh))]
        rows.append((f"loss to {name}: ratio", f"{spare / fresh:.2f}"))
    print_table(f"one pod of one process lost on {torch.cuda.get_device_name(0)}, median of {repeats}", rows)


if __name__ == "__main__":
    main()
