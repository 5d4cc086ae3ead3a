"""A Job's world of 2 pods with a spare (`workload.sparePods: 1`), through the real `pulumi up`:
whichever training pod is lost (its container SIGKILLed, deleted, evicted), the waiting spare
takes its place at once, where the Job creates a replacement only after its back-off
(kubernetes#130881), and the run ends as an uninterrupted one. The lost pod's replacement is the
next spare. On the controllers' cluster (a plain Job, which none of them manages), beside the
test cluster's journeys.

Which pods train is decided as they join (a pod of the world that re-joins may itself end up
waiting as the spare), so the test reads it from their logs (the newest `[DDP] process
global_rank=…` line of each rank) and from the rendezvous's own state in the store's pod.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from trainer_testing import same_result

from cluster_testing import (
    CHECKPOINT_EVERY, DISRUPTED_RUN, NAMESPACE, cluster_state, evict, job_condition, kill_container, logged, newest_checkpoint,
    pods, ranks, resumes, spares_waiting, wait_for, wait_for_checkpoint_after, wait_for_the_job_and_both_ranks_done,
)  # fmt: skip

pytestmark = pytest.mark.timeout(1500)

# Long enough for three losses, each after the previous loss's replacement has become the spare
# (the Job's back-off, 10 s then 20 s, and its start).
RUN_ARGS = [*DISRUPTED_RUN[: DISRUPTED_RUN.index("--epochs") + 1], "24", *DISRUPTED_RUN[DISRUPTED_RUN.index("--epochs") + 2 :]]
SPARE = {"nodes": "2", "workload__sparePods": "1", "resources__requests__cpu": "500m", "run__args": RUN_ARGS,
         # each loss costs the survivor one restart of its workers
         "rendezvous__maxRestarts": "10"}  # fmt: skip
def test_a_spare_takes_any_lost_pods_place_within_seconds_and_the_run_ends_as_an_uninterrupted_one(
    controllers_cluster, controllers_dev_image, controllers_stack, reference_result
):
    cluster = controllers_cluster
    expected = reference_result(RUN_ARGS)
    controllers_stack.up(**SPARE)
    job = json.loads(cluster.kubectl("get", "job", "trainer", "-n", NAMESPACE, "-o", "json").stdout)
    assert (job["spec"]["parallelism"], job["spec"]["completions"]) == (3, 3)
    figures: dict[str, dict[str, float | None]] = {}
    worlds: set[tuple[datetime, str]] = set()  # the resumes seen so far: one per loss, none without one
    losses: list[tuple[datetime, str]] = []  # (when, the lost pod's rendezvous address)

    def no_world_formed_since(what: str) -> None:
        # A spare, or a replacement that joins as one, leaves the world training: no other world forms.
        formed = [row for row in resumes(cluster) if row not in worlds]
        assert formed == [], f"a world formed again after {what}: {formed}\n" + lines_between(cluster, max(worlds, default=None), formed[0])

    def lose(what: str, rank: int, how) -> None:
        before = wait_for_checkpoint_after(cluster, max([newest_checkpoint(cluster)["step"], CHECKPOINT_EVERY - 1]))
        try:
            wait_for(lambda: spares_waiting(cluster) >= 1, 180, "a spare waiting in the rendezvous", interval=1)
        except AssertionError as error:
            raise AssertionError(f"{error}\n{cluster_state(cluster)}") from None
        wait_for_checkpoint_after(cluster, newest_checkpoint(cluster)["step"])  # the spare has waited a checkpoint long
        no_world_formed_since(f"the losses before {what}")
        assert job_condition(cluster) is None, f"the run ended before {what}"
        lost = ranks(cluster)[rank]
        seen = set(resumes(cluster))  # the lost pod's lines go with it: new ones are told by time and text, not by count
        worlds.update(seen)
        lost_at = datetime.now(timezone.utc)
        losses.append((lost_at, rendezvous_address(cluster, lost)))
        how(lost)
        resumed_at, line = wait_for(lambda: next((row for row in resumes(cluster) if row not in seen), None), 120,
                                    f"the world resumed after {what}")  # fmt: skip
        # the same size, from the newest checkpoint there was (a SIGTERM writes one more, where it stopped)
        assert int(line.split("ckpt-")[1][:8]) >= before["step"], (what, line, before)
        assert "world of " not in line, line  # a resize says "world of N (was M)"; this world kept its size
        trained_at = wait_for(lambda: next((at for at, _, text in logged(cluster) if at > resumed_at and text.startswith("[TRAIN] ")), None),
                              120, f"the first [TRAIN] line after {what}")  # fmt: skip
        figures[what] = {"resumed": round((resumed_at - lost_at).total_seconds(), 1),
                         "first [TRAIN] line": round((trained_at - lost_at).total_seconds(), 1)}  # fmt: skip
        print(f"\n[figures] job with a spare, {what}: seconds after the loss {figures[what]}; {line}")
        assert lost not in ranks(cluster).values(), "a world of 2 formed without the lost pod: the spare took its place"
        worlds.add((resumed_at, line))

    lose("rank 0's pod: container SIGKILLed", 0, lambda pod: kill_container(cluster, pod))
    lose("rank 1's pod deleted", 1, lambda pod: cluster.kubectl("delete", "pod", pod, "-n", NAMESPACE, "--wait=false"))
    # the budget lets a drain take one of the 3 pods while all 3 run
    lose("rank 0's pod evicted", 0, lambda pod: _evicted(cluster, pod))
    print(f"\n[figures] job with a spare: seconds from losing a pod to the world resumed: "
          f"{ {what: figure['resumed'] for what, figure in figures.items()} }")  # fmt: skip

    ended, done = wait_for_the_job_and_both_ranks_done(cluster)
    assert ended == "Complete", done
    no_world_formed_since("the last loss")
    # Only a lost pod is counted as gone, after its loss: a live pod whose heartbeat came late is not.
    gone = [(at, name, text) for at, name, text in logged(cluster) if " counted as gone, " in text]
    assert [row for row in gone if not any(lost_at < row[0] and f": {address} (" in row[2] for lost_at, address in losses)] == [], gone
    # The same final loss and weights as a world that was never disrupted.
    assert [same_result(done[rank]) for rank in ("0", "1")] == [expected.result()] * 2


def rendezvous_address(cluster, pod: str) -> str:
    """The address a pod's torchrun joins the rendezvous with (--local-addr): its index's DNS name,
    which its replacement shares."""
    spec = pods(cluster, NAMESPACE)[pod]["spec"]
    return f"{spec['hostname']}.{spec['subdomain']}"


def lines_between(cluster, world: tuple[datetime, str] | None, formed: tuple[datetime, str]) -> str:
    """Every pod's log lines from the world before to the one that formed: why it formed."""
    since = world[0] if world else datetime.min.replace(tzinfo=timezone.utc)
    return "\n".join(f"{at:%H:%M:%S.%f} {name} {text}" for at, name, text in logged(cluster) if since <= at <= formed[0])


def _evicted(cluster, pod: str) -> None:
    result = evict(cluster, pod)
    assert result.returncode == 0, result.stderr
