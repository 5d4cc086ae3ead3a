"""Two pods simulated as two torchrun agents on 127.0.0.1, each started by the real entrypoint.

Each agent gets the env the Pulumi program would give its pod; its rank comes from the fake pod
name. The results are compared with an uninterrupted world of the same size and seed.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import signal
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from torch.distributed import TCPStore
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
from waiting import wait_for
from trainer_testing import (
    LONG_ARGS, SMOKE_ARGS, clean_env, descendants, done_lines, entrypoint_command, epoch_records, free_port, kill_tree, pod_env,
    resumed_lines, same_result, start_store, store_at, train_lines, with_option, worker_pids,
)

from trainer import contract as c
from trainer.hang_watch import EXIT_HUNG


def start_pod(spawn, pod_name: str, port: int, out_dir, args=SMOKE_ARGS, **env):
    full_env = clean_env(**pod_env(pod_name, port, **env), OUT_DIR=str(out_dir))
    return spawn(entrypoint_command(args), full_env, pod_name)


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


@pytest.mark.timeout(240)
def test_two_pods_take_their_ranks_from_their_names_and_agree(spawn, tmp_path, reference_result):
    port = free_port()
    second = start_pod(spawn, "ddp-1", port, tmp_path)
    first = start_pod(spawn, "ddp-0", port, tmp_path)
    assert first.wait(180) == 0, first.text()
    assert second.wait(60) == 0, second.text()
    assert "[DDP] pod_index=0 nnodes=2 nproc_per_node=1 world_size=2 master=127.0.0.1" in first.text()
    assert "[DDP] pod_index=1 nnodes=2 nproc_per_node=1 world_size=2 master=127.0.0.1" in second.text()
    assert_both_ranks_end_with((first, second), reference_result(SMOKE_ARGS))
    logs = first.text() + second.text()
    for tag in ("[DDP]", "[TRAIN]", "[EPOCH]", "[DONE]"):
        assert tag in logs


@pytest.mark.timeout(240)
def test_a_master_that_comes_up_10s_late_is_waited_for(spawn, tmp_path, reference_result):
    port = free_port()
    worker = start_pod(spawn, "ddp-1", port, tmp_path, backend="static")
    worker.wait_for(lambda text: "[PREFLIGHT] waiting for 127.0.0.1" in text, 60, "a wait for the master")
    time.sleep(10)
    assert worker.popen.poll() is None, worker.text()
    assert "[DDP] torchrun" not in worker.text(), "torchrun must not start before the master listens"
    master = start_pod(spawn, "ddp-0", port, tmp_path, backend="static")
    assert master.wait(180) == 0, master.text()
    assert worker.wait(60) == 0, worker.text()
    assert "[PREFLIGHT] ok   reach 127.0.0.1" in worker.text()
    assert_both_ranks_end_with((master, worker), reference_result(SMOKE_ARGS))


@pytest.mark.timeout(300)
def test_a_killed_worker_resumes_from_the_checkpoint_and_ends_as_an_uninterrupted_run(spawn, tmp_path, reference_result):
    expected = reference_result(LONG_ARGS)
    first, second = two_pods_past_step_16(spawn, tmp_path, free_port())
    victims = worker_pids(second.pid)
    assert len(victims) == 1, f"expected one worker under ddp-1's agent, found {victims}"
    os.kill(victims[0], signal.SIGKILL)

    assert first.wait(240) == 0, first.text()
    assert second.wait(60) == 0, second.text()
    logs = first.text() + second.text()
    resumed = resumed_lines(logs)
    assert resumed, logs[-4000:]
    assert int(resumed[-1].split("ckpt-")[1][:8]) >= 16
    assert_both_ranks_end_with((first, second), expected)


@pytest.mark.timeout(360)
def test_a_frozen_worker_is_found_by_the_hang_watch_and_the_world_re_forms_exactly(spawn, tmp_path, reference_result):
    """Pod 1's training process stops (SIGSTOP: a stuck GPU, a frozen host): pod 0 waits in a
    collective, finds the hang within the default bound (30 s, well before --pg-timeout's 60),
    names the frozen rank and ends the world; the torchruns re-form it from the checkpoint."""
    expected = reference_result(LONG_ARGS)
    first, second = two_pods_past_step_16(spawn, tmp_path, free_port())
    victims = worker_pids(second.pid)
    assert len(victims) == 1, f"expected one worker under ddp-1's agent, found {victims}"
    os.kill(victims[0], signal.SIGSTOP)

    first.wait_for(lambda text: "[HANG]" in text, 90, "the hang watch's verdict")
    hang = next(line for line in first.text().splitlines() if line.startswith("[HANG]"))
    frozen_rank = rank_of_pod(first.text() + second.text(), pod_index=1)
    # "stopped running (no heartbeat)", or, when it is rank 0, "whose process hosts the world's store"
    assert f"rank {frozen_rank} in pod ddp-1" in hang, hang
    # the step the world stalled after: past the checkpoint of step 16 the freeze came after (how
    # far past depends on how soon the freeze lands on a loaded machine)
    assert f"exit {EXIT_HUNG}" in hang and int(hang.split("bound 30 s) after global step ")[1].split(":")[0]) >= 16, hang

    assert first.wait(240) == 0, first.text()
    assert second.wait(60) == 0, second.text()
    resumed = resumed_lines(first.text() + second.text())
    assert resumed and int(resumed[-1].split("ckpt-")[1][:8]) >= 16
    assert_both_ranks_end_with((first, second), expected)


@pytest.mark.timeout(300)
def test_a_worker_stuck_in_a_collective_with_a_vanished_peer_ends_at_once_on_sigterm(spawn, tmp_path):
    """Pod 1's worker frozen, as a crashed node leaves it (no connection reset): pod 0's worker waits
    in a collective that never completes, inside torch's C++ where Python runs no signal handler.
    The SIGTERM torchrun sends it to re-form the world (a spare waiting, a node lost) ends it within
    seconds, without a checkpoint its peer could never share, instead of when torchrun's shutdown
    timeout runs out (30 s and more: seen on the local cluster, a node crashed). Neither the hang
    watch (off here) nor the process group's timeout (10 minutes here) has a part in it."""
    patient = [*LONG_ARGS[: LONG_ARGS.index("--pg-timeout") + 1], "600"]
    hang_watch_off = {c.HANG_TIMEOUT_CEILING.name: "0"}
    first, second = two_pods_past_step_16(spawn, tmp_path, free_port(), patient, **hang_watch_off)
    (frozen,) = worker_pids(second.pid)
    os.kill(frozen, signal.SIGSTOP)
    (stuck,) = worker_pids(first.pid)
    # the stuck worker has reached a collective its peer never joins: its step count stops
    first.wait_for(lambda text: train_lines(text), 60, "a [TRAIN] line")
    steps = len(train_lines(first.text()))
    time.sleep(3)
    assert len(train_lines(first.text())) == steps and stuck in worker_pids(first.pid)
    os.kill(stuck, signal.SIGTERM)
    wait_for(lambda: stuck not in descendants(first.pid), 30, "the stuck worker to end after its SIGTERM", interval=0.2)
    stopped = [line for line in first.text().splitlines() if line.startswith("[STOP]")]
    assert stopped and "SIGTERM unanswered" in stopped[-1] and "no checkpoint" in stopped[-1], first.text()[-3000:]


def rank_of_pod(logs: str, pod_index: int) -> int:
    """The global rank of the first world's process in pod `pod_index`, from its [DDP] process line."""
    for line in logs.splitlines():
        if line.startswith("[DDP] process ") and f"pod_index={pod_index} " in line:
            return int(line.split("global_rank=")[1].split()[0])
    raise AssertionError(f"no [DDP] process line of pod {pod_index}:\n{logs[-4000:]}")


@pytest.mark.timeout(300)
def test_a_slowed_worker_is_named_as_a_straggler_in_the_train_lines(spawn, tmp_path):
    """Pod 1's process runs a quarter of the time (stopped and continued, as a throttled host would
    be): rank 0's [TRAIN] lines name it, with its pod, among ranks whose forward passes are slow.
    A run of 192 steps: under a full CI run, the 6 windows left of a 64-step run after step 16 named
    it once (seen), the others none."""
    first, second = two_pods_past_step_16(spawn, tmp_path, free_port(), SPARE_RUN)
    victim = worker_pids(second.pid)[0]
    slowed = f"rank{rank_of_pod(first.text() + second.text(), pod_index=1)}@ddp-1"
    throttling = threading.Event()
    # Windows from the log's newest step on; the first few may have begun before the throttling (the
    # log is read behind the training), and in those the slowest rank is whichever this busy machine
    # slowed (seen: rank 0 named for steps 25 to 32, under a full run). So the slowed rank must be
    # named in most of the windows that name one, not in all.
    throttled_from = max([16, *(int(line["global_step"]) for line in train_lines(first.text()))])

    def named(text: str) -> list[str]:
        return [line["straggler"].split("(")[0] for line in train_lines(text)
                if "straggler" in line and int(line["global_step"]) > throttled_from]  # fmt: skip

    def throttle() -> None:
        while not throttling.is_set():
            os.kill(victim, signal.SIGSTOP)
            throttling.wait(0.15)
            os.kill(victim, signal.SIGCONT)
            throttling.wait(0.05)

    thread = threading.Thread(target=throttle, daemon=True)
    thread.start()
    try:
        first.wait_for(lambda text: named(text).count(slowed) >= 2, 120, f"two [TRAIN] lines naming {slowed} a straggler")
    finally:
        throttling.set()
        thread.join()
        os.kill(victim, signal.SIGCONT)
    flagged = named(first.text())
    assert flagged.count(slowed) > len(flagged) / 2, flagged
    assert first.wait(240) == 0, first.text()
    assert second.wait(60) == 0, second.text()


@pytest.mark.timeout(360)
def test_losing_pod_0_and_its_store_re_forms_the_world_around_its_replacement(spawn, tmp_path, reference_result):
    """Pod 0 hosts the rendezvous store: when it dies, pod 1's torchrun fails, and its entrypoint
    waits for the replacement pod 0 (the Job's) and joins the new world, which resumes exactly."""
    expected = reference_result(LONG_ARGS)
    port = free_port()
    first, second = two_pods_past_step_16(spawn, tmp_path, port)
    kill_tree(first.pid)  # the container killed: agent, store and workers at once
    assert first.popen.wait(10) != 0

    second.wait_for(lambda text: "[DDP] re-joining" in text, 60, "pod 1 re-joining after the loss of pod 0")
    # While pod 1 waits for pod 0's replacement, its next torchrun is already up, its workers' fork
    # server importing torch: the world forms once pod 0 is back, with nothing left to import.
    wait_for(lambda: agents_started_ahead(second.pid), 30, "pod 1's next torchrun started ahead", interval=0.1)
    replacement = start_pod(spawn, "ddp-0", port, tmp_path, LONG_ARGS, **RESTARTS)
    assert replacement.wait(240) == 0, replacement.text()
    assert second.wait(60) == 0, second.text()
    # On loopback both pods advertise 127.0.0.1, and rank 0 goes to the torchrun started first (on
    # a cluster, to pod 0, whose name sorts first): here pod 1's, started ahead.
    resumed = resumed_lines(replacement.text() + second.text())
    assert resumed and int(resumed[-1].split("ckpt-")[1][:8]) >= 16, replacement.text()[-4000:]
    assert_both_ranks_end_with((replacement, second), expected)


def command(pid: int) -> list[str]:
    """A process's command line ([] once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return []


def agents_started_ahead(pod_pid: int) -> list[int]:
    """The torchruns under a pod's entrypoint that wait to start, each with its fork server below it."""
    waiting = [pid for pid in descendants(pod_pid) if "trainer.pod.agent" in command(pid) and "--await-start" in command(pid)]
    return [pid for pid in waiting if any("multiprocessing.forkserver" in " ".join(command(below)) for below in descendants(pid))]


def test_sigterm_while_re_joining_ends_the_pod_and_the_torchrun_started_ahead(spawn, tmp_path):
    port = free_port()
    first, second = two_pods_past_step_16(spawn, tmp_path, port)
    kill_tree(first.pid)
    second.wait_for(lambda text: "[DDP] re-joining" in text, 60, "pod 1 re-joining after the loss of pod 0")
    ahead = wait_for(lambda: agents_started_ahead(second.pid), 30, "pod 1's next torchrun started ahead", interval=0.1)
    below = [pid for agent in ahead for pid in [agent, *descendants(agent)]]
    os.kill(second.pid, signal.SIGTERM)
    assert second.wait(30) == c.EXIT_TERMINATED, second.text()[-4000:]
    wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in below), 30, "the torchrun started ahead and its fork server to end")


@pytest.mark.timeout(360)
def test_losing_pod_1_with_no_grace_re_forms_the_world_around_its_replacement(spawn, tmp_path, reference_result):
    """A node lost under pod 1: no SIGTERM, no checkpoint, no leaving the rendezvous. Pod 0's torchrun
    restarts its workers and lets the replacement in once the lost pod missed its heartbeats."""
    expected = reference_result(LONG_ARGS)
    port = free_port()
    first, second = two_pods_past_step_16(spawn, tmp_path, port)
    kill_tree(second.pid)
    assert second.popen.wait(10) != 0

    replacement = start_pod(spawn, "ddp-1", port, tmp_path, LONG_ARGS, **RESTARTS)
    assert replacement.wait(240) == 0, replacement.text()
    assert first.wait(60) == 0, first.text()
    resumed = resumed_lines(first.text())
    assert resumed and int(resumed[-1].split("ckpt-")[1][:8]) >= 16, first.text()[-4000:]
    assert "[DDP] re-joining" not in first.text()  # pod 0's torchrun re-formed the world itself
    assert_both_ranks_end_with((first, replacement), expected)


@pytest.mark.timeout(300)
def test_sigterm_checkpoints_and_exits_then_a_restart_resumes(spawn, tmp_path, reference_result):
    expected = reference_result(LONG_ARGS)
    port = free_port()
    pod = start_pod(spawn, "solo-0", port, tmp_path, LONG_ARGS, nnodes=1, nproc=2)
    checkpoints = tmp_path / "run" / "checkpoints"
    wait_for_file(checkpoints / "ckpt-00000016.json", (pod,), timeout=180)
    os.kill(pod.pid, signal.SIGTERM)  # what the kubelet does to the container's PID 1, the entrypoint
    # 143, which the Job's pod failure policy replaces without counting: a stopped run is not finished
    assert pod.wait(60) == c.EXIT_TERMINATED
    assert "[STOP] stopped by SIGTERM" in pod.text(), pod.text()[-4000:]
    records = [json.loads(p.read_text()) for p in sorted(checkpoints.glob("ckpt-*.json"))]
    assert records[-1]["reason"] == "sigterm"
    stopped_at = records[-1]["step"]

    again = start_pod(spawn, "solo-0", free_port(), tmp_path, LONG_ARGS, nnodes=1, nproc=2)
    assert again.wait(240) == 0, again.text()
    assert f"[CKPT] resumed from ckpt-{stopped_at:08d}:" in again.text()
    assert [same_result(line) for line in done_lines(again.text())] == [expected, expected]


@pytest.mark.timeout(360)
def test_a_world_resized_from_2_to_3_goes_on_at_the_exact_sample_and_learning_rate(spawn, tmp_path):
    """The resize journey in processes: stopped at a checkpoint in a world of 2, resumed in a world of 3."""
    samples, per_step_2, per_step_3 = 16384, 2 * 256, 3 * 256  # LONG_ARGS: --samples 16384 --batch 256
    pod = start_pod(spawn, "solo-0", free_port(), tmp_path, LONG_ARGS, nnodes=1, nproc=2)
    checkpoints = tmp_path / "run" / "checkpoints"
    wait_for_file(checkpoints / "ckpt-00000016.json", (pod,), timeout=180)
    os.kill(pod.pid, signal.SIGTERM)
    assert pod.wait(60) == c.EXIT_TERMINATED
    stopped = json.loads(sorted(checkpoints.glob("ckpt-*.json"))[-1].read_text())
    assert stopped["reason"] == "sigterm" and stopped["world_size"] == 2
    assert stopped["samples_in_epoch"] == stopped["step_in_epoch"] * per_step_2

    bigger = start_pod(spawn, "solo-0", free_port(), tmp_path, LONG_ARGS, nnodes=1, nproc=3)
    assert bigger.wait(240) == 0, bigger.text()
    log = bigger.text()
    assert f"sample {stopped['samples_in_epoch']}/{samples}, global step {stopped['step']} (sigterm checkpoint), world of 3 (was 2): global batch {per_step_3} (was {per_step_2})" in log, log[-3000:]

    # Epoch 1 is the samples the world of 2 took, then whole steps of the world of 3 up to the end.
    first_epoch = epoch_records(tmp_path / "run")[0]
    taken_after = first_epoch["samples"] - stopped["samples_in_epoch"]
    assert taken_after > 0 and taken_after % per_step_3 == 0
    assert 0 <= samples - first_epoch["samples"] < per_step_3

    # The learning rate goes on along the schedule fixed at the start (cosine over 2 epochs of the
    # world of 2, to 0.1 of 1e-3), read at the samples seen before each step.
    schedule = 2 * (samples // per_step_2) * per_step_2
    for line in log.splitlines():
        if line.startswith("[TRAIN]"):
            fields = dict(part.split("=", 1) for part in line.split()[1:] if "=" in part)
            seen_before = int(fields["samples"]) - per_step_3
            expected = 1e-3 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, seen_before / schedule))))
            assert float(fields["lr"]) == pytest.approx(expected, rel=1e-6), line


# --- the rendezvous store in a process of its own (trainer.pod.rendezvous_store) ----------------
def torchruns_of(pod_pid: int) -> list[int]:
    """The torchrun agents under a pod's entrypoint (one, unless one is started ahead)."""
    return [pid for pid in descendants(pod_pid) if command(pid)[1:3] == ["-m", "trainer.pod.agent"]]


@pytest.mark.timeout(360)
def test_losing_pod_0_with_the_store_apart_leaves_pod_1s_torchrun_to_let_the_replacement_in(spawn, tmp_path, reference_result):
    """The store outlives pod 0: pod 1's torchrun does not fail, it restarts its workers and waits in
    the rendezvous, where pod 0's replacement (which waits for the store, not hosts it) joins it."""
    expected = reference_result(LONG_ARGS)
    port, store_port = free_port(), free_port()
    store = start_store(spawn, store_port)
    first, second = two_pods_past_step_16(spawn, tmp_path, port, **store_at(store_port))
    assert f"[PREFLIGHT] ok   reach 127.0.0.1:{store_port}" in first.text(), "pod 0 waits for the store like any pod"
    torchrun = torchruns_of(second.pid)
    assert len(torchrun) == 1, torchrun
    kill_tree(first.pid)
    assert first.popen.wait(10) != 0

    replacement = start_pod(spawn, "ddp-0", port, tmp_path, LONG_ARGS, **RESTARTS, **store_at(store_port))
    replacement.wait_for(lambda text: "[DDP] process " in text, 180, "the replacement's process in the re-formed world")
    assert torchruns_of(second.pid) == torchrun, "pod 1's torchrun stayed, and none was started ahead"
    assert replacement.wait(240) == 0, replacement.text()
    assert second.wait(60) == 0, second.text()
    assert "[DDP] re-joining" not in second.text(), second.text()[-4000:]
    assert second.text().count("[DDP] torchrun ") == 1, "pod 1's first torchrun re-formed the world itself"
    resumed = resumed_lines(replacement.text() + second.text())
    assert resumed and int(resumed[-1].split("ckpt-")[1][:8]) >= 16, replacement.text()[-4000:]
    assert_both_ranks_end_with((replacement, second), expected)
    assert store.popen.poll() is None, "the store serves the world to its end"


@pytest.mark.timeout(420)
def test_losing_the_store_apart_and_restarting_it_re_joins_both_pods_to_a_world_that_ends_exactly(spawn, tmp_path, reference_result):
    """The store's process killed (its pod lost) and started again on the same port, empty, while
    the world trains: each torchrun loses the rendezvous and fails; both entrypoints re-join, wait
    for the store, and the world forms again from the checkpoint."""
    expected = reference_result(LONG_ARGS)
    port, store_port = free_port(), free_port()
    store = start_store(spawn, store_port)
    first, second = two_pods_past_step_16(spawn, tmp_path, port, **store_at(store_port))
    kill_tree(store.pid)
    assert store.popen.wait(10) != 0
    start_store(spawn, store_port, "store-again")

    for pod in (first, second):
        pod.wait_for(lambda text: "[DDP] re-joining" in text, 120, f"{pod.log.stem} re-joining after the loss of the store")
    assert first.wait(240) == 0, first.text()
    assert second.wait(60) == 0, second.text()
    resumed = resumed_lines(first.text() + second.text())
    assert resumed and int(resumed[-1].split("ckpt-")[1][:8]) >= 16, first.text()[-4000:]
    assert_both_ranks_end_with((first, second), expected)


@pytest.mark.timeout(300)
def test_a_world_that_starts_after_one_has_ended_at_the_same_store_trains(spawn, tmp_path):
    """torchrun closes its rendezvous when a world ends. The store apart outlives the world, so the
    next world of the same id (the Job replaced for one more epoch, a StatefulSet's pods started
    again) would meet that closed rendezvous; it gets one of its own and trains."""
    store_port, port = free_port(), free_port()
    start_store(spawn, store_port)
    for epochs, name in (("1", "first"), ("2", "second")):
        args = [*SMOKE_ARGS, "--epochs", epochs]
        pods = [start_pod(spawn, f"ddp-{i}", port, tmp_path, args, **store_at(store_port)) for i in (0, 1)]
        for pod in pods:
            assert pod.wait(180) == 0, f"the {name} world: {pod.text()[-3000:]}"
        assert sorted(line["rank"] for line in results_of(*pods)) == ["0", "1"], name
        assert {line["epochs"] for line in results_of(*pods)} == {epochs}, name
        moved = [pod for pod in pods if "[DDP] rendezvous test-run is closed (a world of it ended): this world's is test-run.1" in pod.text()]
        assert len(moved) == (2 if name == "second" else 0), name


@pytest.mark.timeout(180)
def test_an_elastic_pod_below_its_minimum_waits_its_join_timeout_then_fails_saying_why(spawn, tmp_path):
    """nodes 2:3 with one pod: it says what its world needs, waits RDZV_JOIN_TIMEOUT, and fails."""
    store = free_port()
    start_store(spawn, store)
    elastic = {c.NNODES.name: "2:3", c.PET_NNODES.name: "2:3", c.WORLD_SIZE.name: "2:3", c.RDZV_JOIN_TIMEOUT.name: "5"}
    pod = start_pod(spawn, "ddp-0", free_port(), tmp_path, SMOKE_ARGS, kind=c.INDEXED_JOB, **store_at(store), **elastic,
                    **{c.JOB_COMPLETION_INDEX: "0"})  # fmt: skip
    code = pod.wait(120)
    text = pod.text()
    assert code != 0, text[-3000:]
    assert "[DDP] elastic world of 2:3 pods: it trains once 2 have joined" in text and "waits up to 5 s" in text, text[-3000:]
    assert "--nnodes=2:3" in text and "RendezvousTimeoutError" in text, text[-3000:]
    assert "[TRAIN]" not in text


@pytest.mark.timeout(300)
def test_a_pod_waiting_in_the_rendezvous_for_a_lost_peer_ends_at_once_on_sigterm(spawn, tmp_path):
    """Pod 1 stopped by SIGTERM (deleted): pod 0's torchrun restarts its workers and waits in the
    rendezvous of a store apart for a replacement. A SIGTERM there (its Job or JobSet deleted, the
    world restarted) ends the pod well within the workers' shutdown timeout, not after it."""
    port, store_port = free_port(), free_port()
    start_store(spawn, store_port)
    first, second = two_pods_past_step_16(spawn, tmp_path, port, **store_at(store_port), **{c.SHUTDOWN_TIMEOUT.name: "100"})
    os.kill(second.pid, signal.SIGTERM)
    assert second.wait(60) == c.EXIT_TERMINATED, second.text()[-3000:]
    # pod 0's workers stopped at the SIGTERM checkpoint (143; rank 0, which says [STOP], may be in
    # either pod), and its torchrun waits for the world again
    first.wait_for(lambda text: "(exitcode: 143)" in text, 60, "pod 0's workers stopped")
    time.sleep(5)
    assert first.popen.poll() is None, first.text()[-3000:]
    os.kill(first.pid, signal.SIGTERM)
    assert first.wait(60) == c.EXIT_TERMINATED, first.text()[-3000:]


def start_world_with_a_spare(spawn, tmp_path, args, **env):
    """A Job's world of 2 pods and 1 spare (SPARE_PODS=1) at a store apart: three pods, indexes 0-2,
    how to start pod i again (a replacement, as the Job starts one), and the store's port."""
    port, store_port = free_port(), free_port()
    start_store(spawn, store_port)
    spare = {c.SPARE_PODS.name: "1", **store_at(store_port), **RESTARTS, **env}

    def start(index: int):
        return start_pod(spawn, f"ddp-{index}", port, tmp_path, args, kind=c.INDEXED_JOB, **{c.JOB_COMPLETION_INDEX: str(index)}, **spare)

    return [start(index) for index in range(3)], start, store_port


def training_pods(pods) -> list:
    """The pods whose training processes run (the spare has none)."""
    return [pod for pod in pods if worker_pids(pod.pid)]


@pytest.mark.timeout(420)
def test_a_spare_takes_a_lost_pods_place_and_the_world_ends_as_an_uninterrupted_run(spawn, tmp_path, reference_result):
    """Two pods train and a third waits as a spare. Killed with no grace, a training pod leaves the
    world; the spare joins the next one at once, which resumes from the checkpoint with the same
    size. The lost pod's replacement, started as the Job would, waits as the next spare: no world
    forms again, and the run ends with the uninterrupted run's result."""
    expected = reference_result(SPARE_RUN)
    pods, start, store_port = start_world_with_a_spare(spawn, tmp_path, SPARE_RUN)
    wait_for_file(tmp_path / "run" / "checkpoints" / "ckpt-00000016.json", pods, timeout=180)
    trained = wait_for(lambda: found if len(found := training_pods(pods)) == 2 else None, 30, "two pods training")
    (spare,) = [pod for pod in pods if pod not in trained]
    assert "[DDP] 2 pods train and 1 wait as spares (SPARE_PODS)" in spare.text(), spare.text()[-3000:]
    assert "[TRAIN]" not in spare.text() and "[DDP] process " not in spare.text()
    lost, kept = trained
    kill_tree(lost.pid)
    assert lost.popen.wait(10) != 0
    spare.wait_for(lambda text: "[DDP] process " in text, 120, "the spare in the next world")
    replacement = start(pods.index(lost))
    # it waits on the rendezvous's redundancy list while the world trains on
    agent = wait_for(lambda: found[0] if len(found := torchruns_of(replacement.pid)) == 1 else None, 60, "the replacement's torchrun")
    wait_for(lambda: ("127.0.0.1", agent) in rendezvous_nodes(store_port, "redundancy_list"), 120, "the replacement waiting as a spare",
             gone=lambda: spare.ended() or kept.ended())  # fmt: skip

    assert spare.wait(240) == 0, spare.text()[-4000:]
    assert kept.wait(60) == 0, kept.text()[-4000:]
    resumed = resumed_lines(spare.text() + kept.text())
    assert len(resumed) == 1 and int(resumed[0].split("ckpt-")[1][:8]) >= 16, kept.text()[-4000:]
    assert_both_ranks_end_with((spare, kept), expected)
    assert "[DDP] process " not in replacement.text(), "the replacement waited as the next spare"
    replacement.wait_for(lambda text: "[DDP] the world ended while this pod waited as a spare" in text, 60, "the replacement seeing the world end")
    os.kill(replacement.pid, signal.SIGTERM)
    assert replacement.wait(30) == c.EXIT_TERMINATED, replacement.text()[-3000:]


@pytest.mark.timeout(300)
def test_a_spare_that_never_trained_outlasts_the_world_without_failing(spawn, tmp_path):
    """The world ends while the spare waits: the spare says so and waits for its Job to end it (the
    Job completes at the world's first success), neither failing (a failure the Job would count)
    nor succeeding (a success would end a Job whose world failed). A SIGTERM then ends it."""
    pods, _, _ = start_world_with_a_spare(spawn, tmp_path, SMOKE_ARGS)
    done = wait_for(lambda: ended if len(ended := [pod for pod in pods if pod.ended()]) == 2 else None, 180, "the world's two pods ending")
    assert [pod.popen.returncode for pod in done] == [0, 0], [pod.text()[-2000:] for pod in done]
    (spare,) = [pod for pod in pods if pod not in done]
    spare.wait_for(lambda text: "[DDP] the world ended while this pod waited as a spare" in text, 60, "the spare seeing the world end")
    time.sleep(3)
    assert spare.popen.poll() is None, spare.text()[-3000:]
    os.kill(spare.pid, signal.SIGTERM)
    assert spare.wait(30) == c.EXIT_TERMINATED, spare.text()[-3000:]


def rendezvous_nodes(store_port: int, held_in: str = "last_heartbeats") -> set[tuple[str, int]]:
    """(address, agent pid) of the nodes torchrun's rendezvous holds: every node (its heartbeats:
    participants, waiting and spare nodes), or those of one of its lists (redundancy_list: the spares)."""
    store = TCPStore("127.0.0.1", store_port, is_master=False, timeout=timedelta(seconds=10))
    state = pickle.loads(C10dRendezvousBackend(store, "test-run").get_state()[0])
    return {(node.addr, node.pid) for node in getattr(state, held_in)}


@pytest.mark.timeout(300)
def test_a_pod_stopped_by_sigterm_leaves_the_rendezvous_at_once(spawn, tmp_path):
    """torchrun leaves a stopped pod's node in the rendezvous until its heartbeat lapses, and the
    next world (a spare, a replacement) cannot form without it until then; the agent takes it out
    as the pod stops."""
    port, store_port = free_port(), free_port()
    start_store(spawn, store_port)
    first, second = two_pods_past_step_16(spawn, tmp_path, port, **store_at(store_port))
    (agent,) = torchruns_of(second.pid)
    assert ("127.0.0.1", agent) in rendezvous_nodes(store_port)
    os.kill(second.pid, signal.SIGTERM)
    assert second.wait(60) == c.EXIT_TERMINATED, second.text()[-3000:]
    assert ("127.0.0.1", agent) not in rendezvous_nodes(store_port), "the stopped pod's node is still in the rendezvous"
    assert "[DDP] left the rendezvous" in second.text(), second.text()[-3000:]
    # (a SIGTERM that comes while torchrun logs its workers' exit is lost in its logging: after it)
    first.wait_for(lambda text: "(exitcode: 143)" in text, 60, "pod 0's workers stopped")
    time.sleep(3)
    os.kill(first.pid, signal.SIGTERM)
    assert first.wait(60) == c.EXIT_TERMINATED, first.text()[-3000:]
