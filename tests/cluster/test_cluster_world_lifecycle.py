"""What a cluster does to a training world, and the world surviving it: any pod lost (pod 0, which
hosts the rendezvous store, included), a resize while it trains, and destroy then up (a hung pod:
test_cluster_hang_watch.py).

Each journey deploys the dev stack with the real `pulumi up` (see cluster_testing), and reads what
the cluster and /out show. The figures (time to re-form, time for a resize) are
printed for the README.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from trainer_testing import same_result, with_option

from cluster_testing import (
    CHECKPOINT_EVERY, EngineStack, UpFailed, DISRUPTED_RUN, NAMESPACE, WORKLOAD, evict, final_done_lines, get,
    job_condition, kill_container, newest_checkpoint, paced, pod_name, pod_resumed_lines, pods, print_reform_timeline, resumed_step, run_dir, wait_for,
    wait_for_checkpoint_after, wait_for_reform, wait_for_world, world_pods,
)  # fmt: skip
from ddp_infra.claim_changes import ClaimChangeRefused
from trainer import contract

pytestmark = pytest.mark.timeout(1500)

# Three pods of the dev stack on the node's two CPUs.
SMALL_PODS = {"resources__requests__cpu": "500m"}
# The disrupted run at a pace (cluster_testing.paced): its losses and restarts are Kubernetes' waits.
RUN_ARGS = paced(DISRUPTED_RUN, 8)
# ...made long enough that the world still trains when a test's next `up` or `destroy` reaches it:
# a run that has ended stops at no SIGTERM checkpoint (its 3 epochs once ended during the engine's
# run of a kind switch, on an idle machine). 50 epochs: 160 s at the pace.
TRAINING_RUN = with_option(RUN_ARGS, "--epochs", "50")


def checkpoints(cluster) -> Path:
    return run_dir(cluster) / "checkpoints"


@pytest.mark.parametrize("kind", [contract.INDEXED_JOB, contract.STATEFULSET])
def test_losing_any_pod_re_forms_the_world_and_ends_as_an_uninterrupted_run(cluster, dev_stack, reference_result, kind):
    """The same losses under both kinds: a Job's controller replaces a pod 10 s x 2^(n-1) after the
    loss (kubernetes#130881), a StatefulSet's at once and its kubelet restarts a killed container."""
    expected = reference_result(RUN_ARGS)
    dev_stack.up(run__args=RUN_ARGS, workload__kind=kind)
    wait_for_world(cluster)
    figures = {}

    def lose(what: str, how) -> None:
        before = wait_for_checkpoint_after(cluster, max([newest_checkpoint(cluster)["step"], CHECKPOINT_EVERY - 1]))
        lost = 0 if what.startswith("pod 0") else 1
        seen = 0 if lost == 0 else len(pod_resumed_lines(cluster))  # a new pod 0 starts a new log
        lost_at = datetime.now(timezone.utc)
        how()
        line, seconds = wait_for_reform(cluster, seen)
        # At most one checkpoint interval is lost: the world resumes from the newest checkpoint
        # there was (a SIGTERM writes one more, where it stopped).
        assert resumed_step(line) >= before["step"], (what, line, before)
        figures[what] = round(seconds, 1)
        print(f"\n[figures] {kind}, {what}: the world resumed {seconds:.1f} s later, from {line.split()[3]}")
        print_reform_timeline(cluster, f"{kind}, {what}", lost_at, [lost])

    lose("pod 0 killed", lambda: kill_container(cluster, pod_name(cluster, 0)))
    lose("pod 1 deleted", lambda: cluster.kubectl("delete", "pod", pod_name(cluster, 1), "-n", NAMESPACE, "--wait=false"))
    lose("pod 0 evicted", lambda: _evicted(cluster, pod_name(cluster, 0)))
    print(f"\n[figures] {kind}: seconds from losing a pod to the world resumed: {figures}")

    if kind == contract.INDEXED_JOB:
        assert wait_for(lambda: job_condition(cluster), 900, "the Job to end", interval=3) == "Complete"

    def every_pods_last_done_line() -> list[dict[str, str]] | None:
        # A StatefulSet's pods start again once the run ends and report the finished run, so a pod's
        # log can be a new container's, with no line yet.
        lines = final_done_lines(cluster)
        return lines if len(lines) == 2 else None

    finals = wait_for(every_pods_last_done_line, 900, "both pods' [DONE] lines", interval=3)
    assert sorted(line["rank"] for line in finals) == ["0", "1"]
    # The same final loss and weights as a world that was never disrupted: the resumes were exact.
    assert [same_result(line) for line in finals] == [expected.result()] * 2


def _evicted(cluster, pod: str) -> None:
    # The budget lets a drain take one pod at a time: the Eviction API accepts it.
    result = evict(cluster, pod)
    assert result.returncode == 0, result.stderr


def world_env(cluster) -> set[tuple[str, str]]:
    """(NNODES, Job uid) of every pod in the namespace: one world has one of each."""
    found = set()
    for pod in pods(cluster, NAMESPACE).values():
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        found.add((env[contract.NNODES.name], pod["metadata"]["ownerReferences"][0]["uid"]))
    return found


def uids_and_restarts(cluster) -> dict[str, object]:
    """What changes when the world is touched: the Job's uid and generation, each pod's uid and restarts."""
    job = get(cluster, "job", WORKLOAD, NAMESPACE)
    return {"job": (job["metadata"]["uid"], job["metadata"]["generation"]),
            **{name: (pod["metadata"]["uid"], [c.get("restartCount") for c in pod.get("status", {}).get("containerStatuses", [])])
               for name, pod in pods(cluster, NAMESPACE).items()}}  # fmt: skip


class SizePoller:
    """Polls the namespace's pods while a block runs: every world size (NNODES) seen among them at once."""

    def __init__(self, cluster, interval: float = 0.5):
        self.cluster, self.interval, self.seen = cluster, interval, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.seen.append(sorted({size for size, _ in world_env(self.cluster)}))
            self._stop.wait(self.interval)

    def __enter__(self) -> "SizePoller":
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


def test_a_resize_while_training_stops_the_world_and_resumes_it_whole_at_the_new_size(cluster, dev_stack):
    dev_stack.up(run__args=TRAINING_RUN, **SMALL_PODS)
    wait_for_world(cluster, 2)
    claims = claim_uids(cluster)
    # An unchanged `up` leaves the running world alone: the same Job and pods, no restart.
    untouched = uids_and_restarts(cluster)
    dev_stack.up(run__args=TRAINING_RUN, **SMALL_PODS)
    assert uids_and_restarts(cluster) == untouched
    figures = {}
    for before, after in ((2, 3), (3, 2)):
        wait_for_checkpoint_after(cluster, newest_checkpoint(cluster)["step"])
        started = time.monotonic()
        with SizePoller(cluster) as poller:
            dev_stack.up(nodes=str(after), run__args=TRAINING_RUN, **SMALL_PODS)
        # No pod of the old size ran beside one of the new size at any poll while `up` ran.
        assert poller.seen and all(len(sizes) <= 1 for sizes in poller.seen), poller.seen
        # up returned once the old world was gone: it stopped at a SIGTERM checkpoint of its own size.
        stopped = newest_checkpoint(cluster)
        assert (stopped["reason"], stopped["world_size"]) == ("sigterm", before), stopped
        job = get(cluster, "job", WORKLOAD, NAMESPACE)
        assert job["spec"]["completions"] == job["spec"]["parallelism"] == after
        line, _ = wait_for_reform(cluster, 0)
        figures[f"{before} -> {after}"] = round(time.monotonic() - started, 1)
        # One world of the new size, resumed at the exact sample where the old one stopped.
        assert world_env(cluster) == {(str(after), job["metadata"]["uid"])}
        assert sorted(world_pods(cluster)) == list(range(after))
        assert f"ckpt-{stopped['step']:08d}:" in line and f"sample {stopped['samples_in_epoch']}/" in line, line
        assert f"world of {after} (was {before})" in line, line
        wait_for_world(cluster, after)
    print(f"\n[figures] seconds from `up` with a new size to the resized world resumed: {figures}")
    # No claim was touched.
    assert claim_uids(cluster) == claims


def test_switching_the_workload_kind_replaces_the_world_after_it_stopped(cluster, dev_stack):
    """Job -> StatefulSet: one resource of another kind (an alias), so the Job's world is stopped
    and gone before the StatefulSet's starts; never two worlds on one /out/<run>."""
    dev_stack.up(run__args=TRAINING_RUN)
    wait_for_world(cluster)
    wait_for_checkpoint_after(cluster, CHECKPOINT_EVERY - 1)
    dev_stack.up(run__args=TRAINING_RUN, workload__kind="statefulset")
    stopped = newest_checkpoint(cluster)
    assert stopped["reason"] == "sigterm", stopped
    assert "Job" not in owner_kinds(cluster), "the Job's pods outlived the switch"
    line, _ = wait_for_reform(cluster, 0)
    assert f"ckpt-{stopped['step']:08d}:" in line, line
    assert owner_kinds(cluster) == {"StatefulSet"}


def owner_kinds(cluster) -> set[str]:
    return {pod["metadata"]["ownerReferences"][0]["kind"] for pod in pods(cluster, NAMESPACE).values()}


def claim_uids(cluster) -> dict[str, str]:
    """Each claim's uid by name: a claim replaced or re-created has another."""
    claims = json.loads(cluster.kubectl("get", "pvc", "-n", NAMESPACE, "-o", "json").stdout)["items"]
    return {claim["metadata"]["name"]: claim["metadata"]["uid"] for claim in claims}


def test_destroy_then_up_adopts_the_retained_claims_and_resumes(cluster, dev_stack):
    dev_stack.up(run__args=TRAINING_RUN)
    wait_for_world(cluster)
    wait_for_checkpoint_after(cluster, CHECKPOINT_EVERY - 1)
    claims = claim_uids(cluster)

    # A claim change that the claim cannot take in place is refused before anything changes.
    world = {index: pod["metadata"]["uid"] for index, pod in world_pods(cluster).items()}
    with pytest.raises(ClaimChangeRefused, match=r"storage\.outputs\.storageClass.*would replace claim"):
        dev_stack.up(run__args=TRAINING_RUN, storage__outputs__storageClass="fast")
    assert {index: pod["metadata"]["uid"] for index, pod in world_pods(cluster).items()} == world
    assert claim_uids(cluster) == claims

    dev_stack.destroy()
    # The world is gone, after a checkpoint; the claims and their namespace are kept.
    stopped = newest_checkpoint(cluster)
    assert stopped["reason"] == "sigterm", stopped
    assert not pods(cluster, NAMESPACE)
    for kind in ("job", "service", "poddisruptionbudget", "networkpolicy", "serviceaccount"):
        left = cluster.kubectl("get", kind, "-n", NAMESPACE, "-l", "app.kubernetes.io/part-of=ddp-infra", "-o", "name")
        assert not left.stdout.strip(), left.stdout
    assert claim_uids(cluster) == claims

    # up again: the namespace and the claims are adopted, not met with AlreadyExists, and the run resumes.
    dev_stack.up(run__args=TRAINING_RUN)
    line, _ = wait_for_reform(cluster, 0)
    assert f"ckpt-{stopped['step']:08d}:" in line, line
    assert claim_uids(cluster) == claims


def test_a_second_stack_on_the_same_namespace_is_refused_and_leaves_the_first_alone(cluster, dev_stack, tmp_path):
    """Another project's dev stack (its own state) aimed at the namespace of a running world: its
    `up` fails with AlreadyExists, and neither it nor its `destroy` touches the first's world."""
    dev_stack.up(run__args=TRAINING_RUN)
    wait_for_world(cluster)
    world = uids_and_restarts(cluster)
    claims = claim_uids(cluster)
    second = EngineStack(cluster, tmp_path / "second")
    try:
        with pytest.raises(UpFailed) as refused:
            second.up(run__args=TRAINING_RUN)
        assert "already exists" in refused.value.result.output, refused.value.result.output
        assert uids_and_restarts(cluster) == world
    finally:
        second.destroy()
    assert uids_and_restarts(cluster) == world
    assert claim_uids(cluster) == claims
