"""The elastic journey under a gang scheduler (`nodes: 2:3`; test_cluster_elastic_jobset.py), through
the real `pulumi up`: with room for one pod, none of the world's starts; with room for its minimum,
2 are bound together and train; it grows when capacity appears, shrinks and goes on when a pod is
lost and nothing can replace it, grows again, and ends with every sample of each epoch trained
exactly once, as the samples the ranks fed their model show (trainer/sample_record.py).

Capacity is the node's CPU: the world's pods ask for 500m each, and placeholder pods take what
the test wants kept from them. The elastic Job's journey, on three nodes (test_cluster_nodes.py),
shares the world's settings and the check of the samples it trained (there, of the epochs trained
while it runs on).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone

from cluster_testing import (
    DISRUPTED_RUN, NAMESPACE, PLACEHOLDER, bound, claim_path, cluster_state, free_cpu_millis, hold_cpu, newest_checkpoint, paced, pods, jobset_status,
    place_placeholder, placeholder_phase, remove_placeholder, resumes, terminal_state, wait_for, wait_for_checkpoint_after,
    world_pods,
)  # fmt: skip
from trainer import contract
from trainer.sample_record import trained_samples
from trainer.sampler import EpochSampler

POD_CPU_MILLIS = 500
SAMPLES_DIR = "elastic-samples"  # under /out
EPOCHS = 60  # long enough for three changes of size while it trains (at a pace: cluster_testing.paced)


def _option(name: str) -> int:
    return int(DISRUPTED_RUN[DISRUPTED_RUN.index(name) + 1])


@dataclass(frozen=True)
class RecordedRun:
    """What a run's sample record (`--sample-record /out/<directory>`) is checked against."""

    directory: str  # under /out
    samples: int  # in the training set
    seed: int
    batch: int  # per process


ELASTIC_RECORD = RecordedRun(SAMPLES_DIR, _option("--samples"), _option("--seed"), _option("--batch"))  # smoke trains on all its samples
RUN_ARGS = [*paced(DISRUPTED_RUN, EPOCHS), "--sample-record", f"{contract.OUT_MOUNT}/{SAMPLES_DIR}"]
ELASTIC = {
    "nodes": "2:3", "resources__requests__cpu": f"{POD_CPU_MILLIS}m", "run__args": RUN_ARGS,
    # a world below its maximum forms this long after its minimum joined (torchrun's last call)
    "rendezvous__lastCallTimeoutSeconds": "5",
    # each change of size can cost a pod one restart of its workers
    "rendezvous__maxRestarts": "10",
}  # fmt: skip


def resized(cluster, since: datetime, size: int, before: int, timeout: float = 300) -> tuple[str, float]:
    """Waits for a world of `size` resumed from one of `before` after `since`; returns its resume line
    and the seconds from `since`, by the line's own time (a look at the logs of a pod on a lost node
    can take long). The line says the rule of a resize: each process keeps its batch."""
    try:
        at, line = wait_for(lambda: next(((at, text) for at, text in resumes(cluster) if at > since and f"world of {size} (was {before})" in text), None),
                            timeout, f"a world of {size} (was {before})", interval=1)  # fmt: skip
    except AssertionError as error:
        raise AssertionError(f"{error}\n{cluster_state(cluster)}") from None
    batch = ELASTIC_RECORD.batch
    assert f"global batch {size * batch} (was {before * batch})" in line, line
    return line, round((at - since).total_seconds(), 1)


def running_world_pods(cluster) -> list[str]:
    return sorted(name for name, pod in pods(cluster, NAMESPACE).items()
                  if pod["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "trainer"
                  and pod["status"].get("phase") == "Running" and "deletionTimestamp" not in pod["metadata"])  # fmt: skip


# The CPU of one pod, held until the gang's minimum is given room.
ONE_SHORT = "one-pod-short"


def journey(cluster, stack, gang: dict) -> None:
    """The journey of an elastic JobSet under a gang scheduler (`gang`: the stack's `scheduling.gang`;
    an elastic Job's, without one, is on three nodes: test_cluster_nodes.py)."""
    remove_placeholder(cluster)
    try:
        _grow_shrink_grow(cluster, stack, gang)
    finally:
        remove_placeholder(cluster)
        remove_placeholder(cluster, ONE_SHORT)


def _grow_shrink_grow(cluster, dev_stack, gang: dict) -> None:
    figures: dict[str, float] = {}
    # Room for one pod: two pods' CPU, less a little, is left to the world, one of them held at first.
    hold_cpu(cluster, {PLACEHOLDER: free_cpu_millis(cluster) - 2 * POD_CPU_MILLIS - POD_CPU_MILLIS // 2, ONE_SHORT: POD_CPU_MILLIS})
    dev_stack.up(**ELASTIC, workload__kind=contract.JOBSET, scheduling__gang=gang, workload__waitFor="none")
    wait_for(lambda: len(world_pods(cluster)) == 3, 120, "the world's 3 pods created", interval=1)
    time.sleep(15)  # the scheduler has had tries
    assert bound(cluster) == [], "no pod of a world short of its minimum may hold a node"

    # Room for the minimum: its 2 pods bound together, the world trains at 2.
    room = datetime.now(timezone.utc)
    remove_placeholder(cluster, ONE_SHORT)
    wait_for(lambda: len(bound(cluster)) == 2, 120, "the minimum bound together", interval=0.5)
    figures["room for the minimum -> 2 bound"] = round((datetime.now(timezone.utc) - room).total_seconds(), 1)
    assert dev_stack.outputs["nodes"] == "2:3"
    wait_for(lambda: len(running_world_pods(cluster)) == 2 and newest_checkpoint(cluster)["step"] >= 0 and 1, 300,
             "a world of the minimum training")  # fmt: skip
    assert len(world_pods(cluster)) == 3  # the third is Pending: no CPU for it
    assert newest_checkpoint(cluster)["world_size"] == 2

    # Capacity appears: the third pod starts and the world grows to it, with no `pulumi up`.
    appeared = datetime.now(timezone.utc)
    remove_placeholder(cluster)
    _, figures["capacity appeared -> a world of 3 resumed"] = resized(cluster, appeared, 3, 2)

    # A pod is lost while nothing can replace it: the world goes on smaller.
    wait_for_checkpoint_after(cluster, newest_checkpoint(cluster)["step"])
    lost = running_world_pods(cluster)[1]
    place_placeholder(cluster, free_cpu_millis(cluster) + POD_CPU_MILLIS // 2)  # binds once the lost pod's CPU is freed
    deleted = datetime.now(timezone.utc)
    cluster.kubectl("delete", "pod", lost, "-n", NAMESPACE, "--wait=false")
    line, figures["pod lost -> a world of 2 resumed"] = resized(cluster, deleted, 2, 3)
    # the lost pod's SIGTERM stopped the world at a checkpoint of its own, which the smaller one resumed from
    assert "(sigterm checkpoint)" in line, line
    assert placeholder_phase(cluster) == "Running"  # it, not the lost pod's replacement, took the freed CPU

    # Capacity again: the lost pod's replacement starts and the world grows back.
    wait_for_checkpoint_after(cluster, newest_checkpoint(cluster)["step"])
    appeared = datetime.now(timezone.utc)
    remove_placeholder(cluster)
    _, figures["capacity appeared again -> a world of 3 resumed"] = resized(cluster, appeared, 3, 2)
    print(f"\n[figures] elastic jobset of 2:3 under {gang['scheduler']}, seconds: {figures}")

    # The run ends: the first pod that succeeds completes the Job (and its JobSet).
    assert wait_for(lambda: terminal_state(cluster), 900, "the JobSet to end", interval=3) == "Completed"
    assert jobset_status(cluster).get("restarts", 0) == 0  # its Job replaced the lost pod; the world went on
    every_sample_of_each_epoch_trained_once(cluster, EPOCHS)


def every_sample_of_each_epoch_trained_once(cluster, epochs: int, still_training: bool = False, run: RecordedRun = ELASTIC_RECORD) -> None:
    """What the ranks of the ended run fed their model (its sample record), epoch by epoch: each
    sample once, every one but less than the last world's step of it. Of a run `still_training`,
    its first `epochs`, those its world has gone past."""
    record = trained_samples(claim_path(cluster, NAMESPACE, "outputs-pvc") / run.directory)
    if still_training:
        record = {epoch: ids for epoch, ids in record.items() if epoch < epochs}
    assert sorted(record) == list(range(epochs)), sorted(record)
    for epoch, ids in record.items():
        assert len(ids) == len(set(ids)), f"epoch {epoch}: {len(ids) - len(set(ids))} samples trained twice"
        order = EpochSampler(run.samples, 1, 0, run.seed, 1)
        order.set_epoch(epoch)
        expected = order.order().tolist()
        # Every sample of the epoch once: the epoch's order up to the last whole step of the world
        # that ended it (the rest, less than one step of it, is dropped as with drop_last).
        assert sorted(ids) == sorted(expected[: len(ids)]), f"epoch {epoch}: not the epoch's first {len(ids)} samples"
        assert len(expected) - len(ids) < 3 * run.batch, f"epoch {epoch}: {len(expected) - len(ids)} samples never trained"
