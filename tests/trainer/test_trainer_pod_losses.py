"""Two pods simulated as two torchrun agents on 127.0.0.1 (pods_testing.py), losing one: pod 0 with
its store, pod 1 with no grace, a pod re-joining, the store apart lost and restarted, a peer lost
while a pod waits, a world after one has ended; spare pods taking a lost pod's place.
The results are compared with an uninterrupted world of the same size and seed.
"""

from __future__ import annotations

import os
import pickle
import signal
import time
from datetime import timedelta
from pathlib import Path

import pytest
from torch.distributed import TCPStore
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
from waiting import wait_for
from trainer_testing import (
    LONG_ARGS, SMOKE_ARGS, descendants, free_port, kill_tree, resumed_lines, start_store, stat_fields, store_at, worker_pids,
)  # fmt: skip
from pods_testing import (
    RESTARTS, SPARE_RUN, assert_both_ranks_end_with, rank_0_text, results_of, start_pod, two_pods_past_step_16, wait_for_file,
)  # fmt: skip

from trainer import contract as c
from trainer.pod.fork_server import NAME as FORK_SERVER_NAME


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
    # rank 0: pod 1's torchrun, started ahead with the lower pid (on a cluster, pod 0's: its name sorts first)
    resumed = resumed_lines(rank_0_text(replacement, second))
    assert resumed and int(resumed[-1].split("ckpt-")[1][:8]) >= 16, replacement.text()[-4000:]
    assert_both_ranks_end_with((replacement, second), expected)


AGENT = ["-m", "trainer.pod.agent"]


def command(pid: int) -> list[str]:
    """A process's command line ([] once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return []


def process_name(pid: int) -> str:
    """A process's name, as ps shows it ("" once it is gone)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def is_agent(pid: int) -> bool:
    """A torchrun agent: `python -m trainer.pod.agent`, not the fork server forked from it or a
    worker forked from that, whose command lines are the agent's too."""
    try:
        parent = int(stat_fields(Path(f"/proc/{pid}/stat"))[1])
    except OSError:
        return False
    return command(pid)[1:3] == AGENT and command(parent)[1:3] != AGENT


def agents_started_ahead(pod_pid: int) -> list[int]:
    """The torchruns under a pod's entrypoint that wait to start, each with its fork server below it."""
    waiting = [pid for pid in descendants(pod_pid) if is_agent(pid) and "--await-start" in command(pid)]
    return [pid for pid in waiting if any(process_name(below) == FORK_SERVER_NAME for below in descendants(pid))]


def test_sigterm_while_re_joining_ends_the_pod_and_the_torchrun_started_ahead(spawn, tmp_path):
    port = free_port()
    first, second = two_pods_past_step_16(spawn, tmp_path, port)
    kill_tree(first.pid)
    second.wait_for(lambda text: "[DDP] re-joining" in text, 60, "pod 1 re-joining after the loss of pod 0")
    ahead = wait_for(lambda: agents_started_ahead(second.pid), 30, "pod 1's next torchrun started ahead", interval=0.1)
    below = [pid for agent in ahead for pid in [agent, *descendants(agent)]]
    os.kill(second.pid, signal.SIGTERM)
    assert second.wait(30) == c.EXIT_TERMINATED, second.text()[-4000:]
    # killed with the pod, not left to end once the fork server's imports are done (a minute under load)
    wait_for(lambda: not any(map(runs, below)), 10, "the torchrun started ahead and its fork server to end")


def runs(pid: int) -> bool:
    """Whether a process runs: it exists and is not a zombie (ended, its exit not yet collected)."""
    try:
        return stat_fields(Path(f"/proc/{pid}/stat"))[0] != "Z"
    except OSError:
        return False


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
    resumed = resumed_lines(rank_0_text(first, replacement))  # the replacement's pid may sort first (seen)
    assert resumed and int(resumed[-1].split("ckpt-")[1][:8]) >= 16, first.text()[-4000:]
    assert "[DDP] re-joining" not in first.text()  # pod 0's torchrun re-formed the world itself
    assert_both_ranks_end_with((first, replacement), expected)


def torchruns_of(pod_pid: int) -> list[int]:
    """The torchrun agents under a pod's entrypoint (one, unless one is started ahead)."""
    return [pid for pid in descendants(pod_pid) if is_agent(pid)]


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
    resumed = resumed_lines(rank_0_text(replacement, second))
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
    resumed = resumed_lines(rank_0_text(first, second))
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
    resumed = resumed_lines(rank_0_text(spare, kept))
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
    # the SIGTERM comes as torchrun logs its workers' exit (test_trainer_agent_signals.py)
    first.wait_for(lambda text: "(exitcode: 143)" in text, 60, "pod 0's workers stopped")
    os.kill(first.pid, signal.SIGTERM)
    assert first.wait(60) == c.EXIT_TERMINATED, first.text()[-3000:]
