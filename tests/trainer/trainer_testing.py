"""Helpers for the trainer's tests: pod envs, free ports, processes and their logs, a text corpus."""

from __future__ import annotations

import fnmatch
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from toolchain.apiserver import free_port
from trainer import contract as c, lines
from trainer.lines import DoneLine, Resumed, TrainLine
from trainer.outputs import METRICS
from waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
SMOKE_ARGS = list(c.DEFAULT_TRAIN_ARGS)
# Long enough to be interrupted part-way: 64 optimizer steps of a 1M-parameter MLP, a checkpoint every 8.
LONG_ARGS = [
    "-m", "trainer.train", "smoke", "--epochs", "2", "--batch", "256", "--samples", "16384", "--features", "512",
    "--hidden", "2048", "--classes", "4", "--lr", "1e-3", "--seed", "7", "--checkpoint-every", "8", "--log-every", "8",
    "--pg-timeout", "60",
]  # fmt: skip


def clean_env(**extra: str) -> dict[str, str]:
    """This process's env without any contract variable or tracker's, single-threaded, with the repo importable."""
    names = {v.name for v in c.ALL} | {c.LEGACY_POD_NUMS, c.LEGACY_POD_PORT, c.LEGACY_JOB_NAME, c.JOB_COMPLETION_INDEX}
    env = {k: v for k, v in os.environ.items() if k not in names and not k.startswith(("PET_", "TORCHELASTIC_", "MLFLOW_", "WANDB_"))}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1", PYTHONWARNINGS="ignore")
    env.update(extra)
    return env


def pod_env(
    pod_name: str,
    port: int,
    nnodes: int = 2,
    nproc: int = 1,
    backend: str = "c10d",
    kind: str = c.STATEFULSET,
    node_rank: str = "",
    run_name: str = "run",
    **extra: str,
) -> dict[str, str]:
    """The env the Pulumi program gives a pod, written with the contract's names only."""
    values = {
        c.NNODES: str(nnodes), c.NPROC_PER_NODE: str(nproc), c.WORLD_SIZE: str(nnodes * nproc),
        c.NODE_RANK: node_rank, c.MASTER_ADDR: "127.0.0.1", c.MASTER_PORT: str(port),
        c.RDZV_BACKEND: backend, c.RDZV_ID: "test-run", c.RDZV_JOIN_TIMEOUT: "60", c.RDZV_READ_TIMEOUT: "60",
        c.MAX_RESTARTS: "0", c.MASTER_WAIT_TIMEOUT: "60", c.POD_NAME: pod_name, c.POD_NAMESPACE: "ml",
        c.SVC_NAME: "ddp", c.WORKLOAD_KIND: kind, c.WORKLOAD_NAME: pod_name.rsplit("-", 1)[0],
        c.RUN_NAME: run_name,
    }  # fmt: skip
    env = {var.name: value for var, value in values.items()}
    for mirror, original in c.PET_MIRRORS.items():
        env[mirror] = env[original]
    env[c.PET_RDZV_ENDPOINT.name] = f"127.0.0.1:{port}"
    env.update(extra)
    return env


def stat_fields(stat: Path) -> list[str]:
    """/proc/<pid>/stat's fields after the command's name (which may hold spaces and parentheses):
    the state first, then the parent's pid. Raises OSError once the process is gone."""
    return stat.read_text().rsplit(")", 1)[1].split()


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (torchrun puts its workers in sessions of their own)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_fields(stat)
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


class Proc:
    def __init__(self, popen: subprocess.Popen, log: Path):
        self.popen, self.log = popen, log

    @property
    def pid(self) -> int:
        return self.popen.pid

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait(self, timeout: float) -> int:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.log.name} still running after {timeout} s; log:\n{self.text()[-4000:]}")

    def wait_for(self, predicate, timeout: float, what: str) -> None:
        """Poll until predicate(log text) holds; fail with the log if the process ends or time runs out."""
        try:
            wait_for(lambda: predicate(self.text()), timeout, what, interval=0.05, gone=self.ended)
        except AssertionError as failed:
            raise AssertionError(f"{failed}; {self.log.name}:\n{self.text()[-4000:]}") from None

    def ended(self) -> str | None:
        """Why this process can no longer print anything (for waiting.wait_for's `gone`)."""
        code = self.popen.poll()
        return None if code is None else f"{self.log.name} exited ({code})"


def done_lines(text: str) -> list[dict[str, str]]:
    """The `[DONE]` lines of a log, each read whole (trainer/lines.py), its fields as printed: equal runs
    compare to the last digit."""
    return [DoneLine.parse(row).fields() for row in lines.tagged(text, DoneLine.TAG)]


def train_lines(text: str) -> list[dict[str, str]]:
    """The `[TRAIN]` lines of a log, each read whole, its fields as printed, in order."""
    return [TrainLine.parse(row).fields() for row in lines.tagged(text, TrainLine.TAG)]


def resumed_lines(text: str) -> list[str]:
    """The `[CKPT] resumed from ckpt-...` lines of a log, each one a resume (trainer/lines.py's Resumed)."""
    found = lines.tagged(text, Resumed.PREFIX)
    assert all(Resumed.parse(row) for row in found), found
    return found


def epoch_records(run: Path) -> list[dict]:
    """The run's metrics.jsonl, one record per epoch."""
    return [json.loads(row) for row in (run / METRICS).read_text().splitlines()]


def entrypoint_command(args: list[str]) -> list[str]:
    """The container's command (from the contract) and args, run with this interpreter."""
    return _with_this_python(c.ENTRYPOINT_COMMAND) + list(args)


def store_command(*args: str) -> list[str]:
    """The rendezvous store pod's command (from the contract) and args, run with this interpreter."""
    return _with_this_python(c.RENDEZVOUS_STORE_COMMAND) + list(args)


def _with_this_python(command: tuple[str, ...]) -> list[str]:
    return [PYTHON if part == "python" else part for part in command]


def start_store(spawn, port: int, name: str = "store") -> "Proc":
    """The rendezvous store in a process of its own, once it listens on `port`."""
    store = spawn(store_command(str(port)), clean_env(), name)
    store.wait_for(lambda text: f"[RDZV] store listening on port {port}" in text, 60, "the store listening")
    return store


def store_apart(endpoint: str) -> dict[str, str]:
    """The pod env of a world whose c10d store runs apart: another address than MASTER_ADDR:MASTER_PORT."""
    return {c.RDZV_ENDPOINT.name: endpoint, c.PET_RDZV_ENDPOINT.name: endpoint}


def store_at(port: int) -> dict[str, str]:
    """store_apart at a store on this machine."""
    return store_apart(f"127.0.0.1:{port}")


def kill_tree(pid: int) -> None:
    for target in [pid, *descendants(pid)]:
        try:
            os.killpg(target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def run_to_end(command: list[str], env: dict[str, str], log: Path, timeout: float, cwd: Path = REPO) -> tuple[int, str]:
    """Run a command to its end with its output in `log`; on timeout, kill it and all below it."""
    with open(log, "wb") as out:
        popen = subprocess.Popen(command, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        code = popen.wait(timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{log.name} still running after {timeout} s:\n{log.read_text()[-4000:]}")
    finally:
        kill_tree(popen.pid)
        popen.wait()
    return code, log.read_text(errors="replace")


def same_result(line: dict[str, str]) -> dict[str, str]:
    """A [DONE] line without what may differ between equal runs (which rank, how long, run name)."""
    return {k: v for k, v in line.items() if k not in ("rank", "seconds", "run")}


def with_option(args: list[str], option: str, value: str) -> list[str]:
    """`args` with `option`'s value replaced (e.g. a run made longer: "--epochs", "40")."""
    at = args.index(option) + 1
    return [*args[:at], value, *args[at + 1 :]]


def uninterrupted_result(args: list[str], out: Path, threads: int = 1, **env: str) -> dict[str, str]:
    """The [DONE] result of an uninterrupted world of 2 processes (one pod, two workers) on this machine,
    each computing on `threads` threads (their number changes float sums on some CPUs), with `env` added."""
    env = clean_env(**pod_env("ref-0", free_port(), nnodes=1, nproc=2), OUT_DIR=str(out), OMP_NUM_THREADS=str(threads), **env)
    # 240 s for the 8 epochs most runs have, more for longer ones: CI's load once stretched 24 epochs past 240 s
    epochs = int(args[args.index("--epochs") + 1]) if "--epochs" in args else 8
    code, text = run_to_end(entrypoint_command(args), env, out / "reference.log", timeout=240 * max(1.0, epochs / 8))
    assert code == 0, text[-4000:]
    # OMP_NUM_THREADS reaches both workers through torchrun, and torch computes on that many
    processes = [lines.key_values(row)["threads"] for row in lines.tagged(text, lines.PROCESS_STARTED)]
    assert processes == [str(threads)] * 2, text[-4000:]
    done = done_lines(text)
    assert len(done) == 2 and same_result(done[0]) == same_result(done[1]), text[-4000:]
    return same_result(done[0])


def worker_pids(pod_pid: int) -> list[int]:
    """The training processes under a pod's entrypoint."""
    return [pid for pid in descendants(pod_pid) if is_training_process(pid)]


def flip_a_bit(path: Path) -> None:
    """One bit in the middle of `path` flipped in place, as a failing disk or a bad copy leaves a file: its size unchanged."""
    middle = path.stat().st_size // 2
    with open(path, "r+b") as file:
        file.seek(middle)
        byte = file.read(1)[0]
        file.seek(middle)
        file.write(bytes([byte ^ 0x10]))


def is_training_process(pid: int) -> bool:
    """A training process: a worker forked from torchrun's fork server, which names it after its
    module, or a `python -m trainer.train` (not the entrypoint or torchrun, whose command lines
    name the module too)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        name = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return False
    module = argv.index(b"-m") + 1 if b"-m" in argv else 0
    return name == "trainer.train" or (0 < module < len(argv) and argv[module] == b"trainer.train")


def write_corpus(directory: Path, seed: int = 0) -> None:
    """train.jsonl and val.jsonl of random sentences over a few words, some beyond ASCII."""
    rng = random.Random(seed)
    words = ["the", "pod", "trains", "a", "model", "on", "text", "and", "writes", "checkpoints", "ünïcode", "日本"]
    directory.mkdir()
    for name, count in (("train.jsonl", 160), ("val.jsonl", 40)):
        with open(directory / name, "w", encoding="utf-8") as file:
            for _ in range(count):
                file.write(json.dumps({"text": " ".join(rng.choice(words) for _ in range(rng.randint(5, 30)))}) + "\n")


def build_context_files() -> dict[str, Path]:
    """What `docker build trainer/` sends, after its .dockerignore: relative path -> file."""
    trainer = REPO / "trainer"
    patterns = [p.strip() for p in (trainer / ".dockerignore").read_text().splitlines() if p.strip() and not p.startswith("#")]
    files = {}
    for path in sorted(trainer.rglob("*")):
        relative = path.relative_to(trainer).as_posix()
        parts = relative.split("/")
        ignored = any(
            fnmatch.fnmatch(relative, p) or fnmatch.fnmatch(relative, p.removeprefix("**/"))
            or any(fnmatch.fnmatch(part, p.removeprefix("**/")) for part in parts)
            for p in patterns
        )  # fmt: skip
        if path.is_file() and not ignored:
            files[relative] = path
    return files


EXAMPLE = REPO / "examples" / "shapes"


def install_example(source: Path, site: Path) -> Path:
    """examples/shapes installed by pip into `site`, as its Dockerfile installs it in its image: its
    own pip command, run on a copy at `source` (pip builds in the source tree)."""
    shutil.copytree(EXAMPLE, source, dirs_exist_ok=True)
    [install] = [line[len("RUN ") :] for line in (EXAMPLE / "Dockerfile").read_text().splitlines() if line.startswith("RUN pip install")]
    command = [str(source) if word == "/opt/shapes" else word for word in shlex.split(install)]
    assert command[:2] == ["pip", "install"] and str(source) in command, install
    subprocess.run([PYTHON, "-m", *command, "--quiet", "--no-index", "--target", str(site)], check=True, timeout=180)
    return site


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the trainer's Dockerfile, continuation lines joined, comments dropped."""
    text = (REPO / "trainer" / "Dockerfile").read_text().replace("\\\n", " ")
    rows = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in rows]


def values_of(name: str) -> list[str]:
    return [args for instruction, args in instructions() if instruction == name]


def image_env(tmp: Path | None = None) -> dict[str, str]:
    """The env the trainer's image sets; with `tmp`, that directory standing in for the pod's /tmp."""
    env = {}
    for args in values_of("ENV"):
        env.update(dict(pair.split("=", 1) for pair in shlex.split(args)))
    return {name: value.replace("/tmp", str(tmp)) for name, value in env.items()} if tmp else env
