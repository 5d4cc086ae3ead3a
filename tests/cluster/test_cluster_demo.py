"""The demo (demo/, `make demo`): the dev stack trained on the local cluster by the real `pulumi up`,
followed to its result, resized while it trains, looked at with the status view, and removed.

The journey runs the demo's command line against the session's cluster (which the demo reuses, and
so leaves running); a cluster the demo starts itself is removed whole by `down`, checked apart with
the pause image only (the trainer image's first import into a new store takes minutes)."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

import yaml

from cluster_testing import NAMESPACE, host_state, pods, status_view
from pulumi_project import toolchain_path
from toolchain.cluster import CACHE, LocalCluster
from trainer_testing import Proc, kill_tree

from demo.cluster import demo_home, remove_cluster, start_cluster
from observe.follow import Follower
from observe.kubectl import Kubectl
from observe.world_state import WorldRef

pytestmark = pytest.mark.timeout(900)
REPO = Path(__file__).resolve().parents[2]
EPOCHS = 6  # the world still trains when the resize's `up` reaches it: 4 epochs to spare, 60 s alone and 2 min in a full run, for an `up` of 15 s alone


def demo(cluster, *args: str) -> list[str]:
    return [sys.executable, "-m", "demo", "--cluster", cluster.name, *args]


def demo_env() -> dict[str, str]:
    return {**os.environ, "PATH": toolchain_path(), "PYTHONPATH": str(REPO)}


def run_demo(cluster, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(demo(cluster, *args), cwd=REPO, env=demo_env(), capture_output=True, text=True, timeout=timeout)


def said(output: str, prefix: str) -> list[str]:
    return [row for row in output.splitlines() if row.startswith(prefix)]


@pytest.fixture
def demo_removed_after(cluster):
    """`demo down` after the test, whatever it left."""
    yield
    if demo_home(cluster.name).exists():
        run_demo(cluster, "down")


def demo_stack_config(cluster) -> dict:
    return yaml.safe_load((demo_home(cluster.name) / "project" / "stacks" / "Pulumi.dev.yaml").read_text())["config"]


def test_the_demo_trains_the_dev_world_through_pulumi_up_resizes_it_and_removes_it(cluster, demo_removed_after, tmp_path):
    log = tmp_path / "demo-up.log"
    with open(log, "wb") as out:
        popen = subprocess.Popen(demo(cluster, "up", "--epochs", str(EPOCHS), "--timeout", "600"), cwd=REPO, env=demo_env(),
                                 stdout=out, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    up = Proc(popen, log)
    try:
        # training, in a world of 2, by the real engine's `up`
        up.wait_for(lambda text: re.search(r"^epoch 2/\d+ ", text, re.M), 420, "the demo's world training its 2nd epoch")
        resized = run_demo(cluster, "resize", "3")
        assert resized.returncode == 0, resized.stdout[-4000:] + resized.stderr[-2000:]
        assert "[demo] a world of 3 is running" in resized.stdout
        assert "Resources:" in resized.stdout  # pulumi up's own lines, shown as they came
        code = up.wait(600)
    finally:
        kill_tree(popen.pid)
        popen.wait()
    output = up.text()
    assert code == 0, output[-6000:]
    followers = [p for p in Path("/proc").glob("[0-9]*/cmdline") if b"logs\x00-f" in (argv := _read(p)) and cluster.kubeconfig.encode() in argv]
    assert not followers, "a `kubectl logs -f` of the demo's cluster outlived the demo"

    # What the user saw: pulumi up, progress per epoch, the resize as one re-form, the result.
    assert re.search(r"\+ 2\d created", output), output[:4000]
    bars = [row for row in output.splitlines() if re.match(r"epoch \d+/\d+ \S+ \d+/\d+ steps · [\d,]+ samples/s · loss \d", row)]
    assert {int(row.split()[1].split("/")[0]) for row in bars} == set(range(1, EPOCHS + 1)), output[-6000:]
    assert any("ETA 0:" in row for row in bars)
    assert said(output, "[start] no checkpoint yet")
    assert said(output, "[re-form] stopped by SIGTERM"), output[-6000:]
    reformed = said(output, "[re-form] resumed from ckpt-")
    assert reformed and "world of 3 (was 2)" in reformed[-1], output[-6000:]
    assert len(said(output, "[epoch] ")) == EPOCHS
    result = dict(field.split("=", 1) for field in said(output, "[demo] result: ")[0].split()[2:])
    assert result["epochs"] == str(EPOCHS) and result["run"] == "smoke-dev", result
    steps = int(result["steps"])

    # The outputs it names are on this machine, as the trainer wrote them.
    run_dir = Path(said(output, "[demo] outputs on this machine")[0].split(": ", 1)[1])
    records = [json.loads(row) for row in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records] == list(range(1, EPOCHS + 1))
    assert (run_dir / "best").is_symlink() and (run_dir / f"epoch-{EPOCHS}").is_dir()
    curve = Path(said(output, "[demo] loss curve: ")[0].split(": ", 1)[1])
    with Image.open(curve) as image:
        assert image.width > 100 and image.height > 100 and len(set(image.convert("L").getextrema())) == 2
        drawn = [json.loads(row)["global_step"] for row in (run_dir / "train-steps.jsonl").read_text().splitlines()]
        assert image.text.get("Points") == f"steps={len(drawn)} epochs={EPOCHS}", image.text
    # no step drawn twice, though the world stopped and resumed from an earlier checkpoint
    assert drawn == sorted(set(drawn)) and drawn[-1] == steps
    assert said(output, "[demo] TensorBoard: .venv/bin/tensorboard --logdir ")

    # The status view, as the stack output prints it, on this cluster.
    command, kubeconfig = said(output, "[demo] status: ")[0].split(": ", 1)[1].split(" --kubeconfig ")
    assert kubeconfig == cluster.kubeconfig
    status = status_view(cluster, command)
    assert status.startswith("job trainer: Complete"), status
    assert re.search(rf"newest checkpoint: ckpt-0*{steps} at global step {steps}, 0:\d\d:\d\d ago", status), status
    assert re.search(rf"last \[TRAIN\] epoch={EPOCHS}/{EPOCHS} step=(\d+)/\1 global_step={steps} ", status), status
    assert len(re.findall(r"^  pod \d  trainer-\d-\S+ +Succeeded ", status, re.M)) == 3, status

    # A size the program refuses: a clear error, and the stack keeps the size it had.
    refused = run_demo(cluster, "resize", "0")
    assert refused.returncode != 0
    assert "nodes" in refused.stdout and "from 1 to 1024" in refused.stdout, refused.stdout[-3000:]
    assert demo_stack_config(cluster)["ddp-infra:nodes"] == "3"

    # Removal: the stack, its state and the namespace; the cluster, which the demo did not start, stays.
    down = run_demo(cluster, "down")
    assert down.returncode == 0, down.stdout[-4000:] + down.stderr
    assert "still is" in down.stdout
    assert not demo_home(cluster.name).exists()
    assert not pods(cluster, NAMESPACE)
    assert cluster.kubectl("get", "namespace", NAMESPACE, check=False).returncode != 0
    assert cluster.kubectl("get", "node", cluster.node_name).returncode == 0


def test_a_failed_run_ends_the_follow_with_its_reason_and_rank_0_s_last_lines(cluster, dev_image, dev_stack):
    # a module that does not exist: each worker fails at once, and the Job with its first failure
    dev_stack.up(run__args=["-m", "trainer.no_such_task"], workload__backoffLimit=0)
    outputs = dev_stack.outputs
    world = WorldRef(outputs["workloadKind"], outputs["workloadName"], outputs["podSelector"])
    out = io.StringIO()
    end = Follower(Kubectl(outputs["namespace"], kubeconfig=cluster.kubeconfig), world, out).follow(timeout_s=300)
    assert not end.ok and end.reason.startswith("Failed: BackoffLimitExceeded"), (end, out.getvalue())
    # the cause, however rank 0's torchrun ended after it (a summary, or a traceback of its own)
    assert end.worker_error[-1] == "ImportError: No module named trainer.no_such_task", (end.worker_error, end.last_lines)
    assert end.last_lines, "rank 0's last lines: how its torchrun ended"
    assert not end.result


def test_a_resize_without_a_demo_says_how_to_start_one(cluster):
    refused = run_demo(cluster, "resize", "3")
    assert refused.returncode != 0
    assert "no demo runs on cluster test: start one with `make demo`" in refused.stdout + refused.stderr


def _read(cmdline: Path) -> bytes:
    try:
        return cmdline.read_bytes()
    except OSError:
        return b""


def test_down_removes_a_cluster_the_demo_started_and_leaves_nothing_behind():
    name = "lifecycle"
    before = host_state(name)
    cluster = start_cluster(name, with_images=("pause",), say=print)
    try:
        assert cluster.status()["running"]
        recorded = json.loads((CACHE / "cluster" / name / "run" / "pids.json").read_text())
    finally:
        remove_cluster(name, say=print)
    assert not (CACHE / "cluster" / name).exists()
    assert not LocalCluster(name).status()["running"]
    assert all(not Path(f"/proc/{pid}").exists() for pid, _ in recorded.values())
    assert host_state(name) == before
