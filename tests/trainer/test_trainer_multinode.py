"""Two pods simulated as two torchrun agents on 127.0.0.1, each started by the real entrypoint.

Each agent gets the env the Pulumi program would give its pod; its rank comes from the fake pod
name. The results are compared with an uninterrupted world of the same size and seed. A world of
two: its ranks, a late master, a worker killed, frozen, stuck or slowed, a SIGTERM and a resize.
Losing a pod, the store or a peer, and spares: test_trainer_pod_losses.py.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import signal
import threading
import time
from pathlib import Path

import pytest
from waiting import wait_for
from trainer_testing import LONG_ARGS, SMOKE_ARGS, descendants, done_lines, epoch_records, free_port, resumed_lines, same_result, train_lines, worker_pids
from pods_testing import SPARE_RUN, assert_both_ranks_end_with, rank_0_text, start_pod, two_pods_past_step_16, wait_for_file

from trainer import contract as c
from trainer.hang_watch import EXIT_HUNG, FLIGHT_RECORDS
from trainer.lines import hang_evidence


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
    # the live rank's stacks, every thread's, where the line says: the training thread waits in the step's collective
    evidence = Path(hang_evidence(hang))
    assert evidence.parent == tmp_path / "run" / "hangs", hang
    live = 1 - frozen_rank
    # the frozen rank could leave none
    assert sorted(str(path.relative_to(evidence)) for path in evidence.rglob("*")) == [FLIGHT_RECORDS, f"{FLIGHT_RECORDS}/rank_{live}", f"rank-{live}.txt"]
    stacks = (evidence / f"rank-{live}.txt").read_text()
    assert stacks.startswith(f"rank {live} in pod ddp-0: no progress for "), stacks[:400]
    assert "in _watch_loop" in stacks and "trainer/loop.py" in stacks and "trainer/step.py" in stacks, stacks
    # above them the flight recorder's summary: the live rank's last collective, enqueued and never completed (its
    # peer never joined), and torch's dump of it beside them
    recorded = stacks.split(f"flight recorder (torch's, in {FLIGHT_RECORDS}/rank_{live}):\n")[1].split("\n\n")[0].splitlines()
    enqueued, completed = (int(recorded[0].split(f"{word} #")[1].split(",")[0]) for word in ("enqueued collective", "completed"))
    assert enqueued > completed and f"  not completed: #{enqueued} gloo:" in stacks, recorded
    assert pickle.loads((evidence / FLIGHT_RECORDS / f"rank_{live}").read_bytes())["pg_status"]["0"]["last_enqueued_collective"] == enqueued

    assert first.wait(240) == 0, first.text()
    assert second.wait(60) == 0, second.text()
    resumed = resumed_lines(rank_0_text(first, second))
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
    wait_for(lambda: train_lines(rank_0_text(first, second)), 60, "a [TRAIN] line", interval=0.05, gone=first.ended)
    steps = len(train_lines(rank_0_text(first, second)))
    time.sleep(3)
    assert len(train_lines(rank_0_text(first, second))) == steps and stuck in worker_pids(first.pid)
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
    throttled_from = max([16, *(int(line["global_step"]) for line in train_lines(rank_0_text(first, second)))])

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
        wait_for(lambda: named(rank_0_text(first, second)).count(slowed) >= 2, 120, f"two [TRAIN] lines naming {slowed} a straggler",
                 interval=0.05, gone=first.ended)
    finally:
        throttling.set()
        thread.join()
        os.kill(victim, signal.SIGCONT)
    flagged = named(rank_0_text(first, second))
    assert flagged.count(slowed) > len(flagged) / 2, flagged
    assert first.wait(240) == 0, first.text()
    assert second.wait(60) == 0, second.text()


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
