"""Sharded checkpoints written in the background by a world of two (CPU, gloo, real processes).

Every run here is the same training (ARGS); only when it checkpoints and how it is interrupted
differ, and each must end with the uninterrupted run's exact result.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from trainer_testing import PYTHON, clean_env, done_lines, flip_a_bit, free_port, kill_tree, same_result

PROBE = str(Path(__file__).with_name("checkpoint_probe.py"))
# 16 optimizer steps an epoch (1024 samples, 2 ranks x 32), 32 in all; a checkpoint every 4 steps
ARGS = ["smoke", "--epochs", "2", "--samples", "1024", "--batch", "32", "--features", "16", "--hidden", "64",
        "--classes", "4", "--lr", "3e-3", "--seed", "11", "--log-every", "8", "--device", "cpu", "--pg-timeout", "60",
        "--run-name", "run", "--keep-checkpoints", "20"]  # fmt: skip
EVERY_4 = ["--checkpoint-every", "4"]

pytestmark = pytest.mark.timeout(300)


def world_of_two(out: Path, name: str, extra: list[str] = (), **env: str) -> list[tuple[int, str]]:
    """Both ranks as plain processes (env:// rendezvous on loopback), run to their end: (exit code, log) each."""
    out.mkdir(exist_ok=True)
    port = str(free_port())
    procs = []
    for rank in (0, 1):
        rank_env = clean_env(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                             MASTER_PORT=port, **env)  # fmt: skip
        log = open(out / f"{name}-rank-{rank}.log", "wb")
        procs.append((subprocess.Popen([PYTHON, PROBE, *ARGS, *extra, "--out-dir", str(out)], env=rank_env,
                                       stdout=log, stderr=subprocess.STDOUT, start_new_session=True), log))  # fmt: skip
    results = []
    try:
        for popen, log in procs:
            try:
                code = popen.wait(240)
            except subprocess.TimeoutExpired:
                code = None
            results.append((code, Path(log.name).read_text(errors="replace")))
    finally:
        for popen, log in procs:
            kill_tree(popen.pid)
            popen.wait(10)
            log.close()
    return results


def result_of(runs: list[tuple[int, str]]) -> dict[str, str]:
    assert [code for code, _ in runs] == [0, 0], "\n".join(text[-3000:] for _, text in runs)
    lines = [same_result(line) for _, text in runs for line in done_lines(text)]
    assert len(lines) == 2 and lines[0] == lines[1], "the replicas end identical"
    return lines[0]


def records(run: Path) -> dict[int, dict]:
    return {int(p.name[5:13]): json.loads(p.read_text()) for p in sorted((run / "checkpoints").glob("ckpt-*.json"))}


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """An uninterrupted run that checkpoints every 4 steps: its run directory and its result."""
    out = tmp_path_factory.mktemp("finished")
    return out / "run", result_of(world_of_two(out, "finished", EVERY_4))


def copy_checkpoints_up_to(run: Path, step: int, to: Path) -> Path:
    """What `run` had on disk when it died right after checkpoint `step`."""
    (to / "run" / "checkpoints").mkdir(parents=True)
    for path in (run / "checkpoints").glob("ckpt-*"):
        if int(path.name[5:13]) <= step:
            copy = shutil.copytree if path.is_dir() else shutil.copy2
            copy(path, to / "run" / "checkpoints" / path.name)
    return to / "run"


def resumes_from_8_passing_over_12(tmp_path: Path, expected: dict[str, str], because: str) -> None:
    """A world of two started on checkpoints up to 12, the 12th damaged: it says why it passes over
    it, resumes from 8, and ends with the uninterrupted run's result."""
    runs = world_of_two(tmp_path, "resumed", EVERY_4)
    text = runs[0][1]
    assert f"[CKPT] skipping ckpt-00000012: {because}" in text, text[-3000:]
    assert "[CKPT] resumed from ckpt-00000008:" in text, text[-3000:]
    assert result_of(runs) == expected


def test_every_rank_writes_its_share_and_the_record_says_what_a_resume_needs(finished):
    run, _ = finished
    found = records(run)
    assert sorted(found) == [4, 8, 12, 16, 20, 24, 28, 32]
    record = found[12]
    assert {k: record[k] for k in ("format", "step", "reason", "world_size", "batch", "grad_accum", "samples_seen",
                                   "samples_in_epoch", "schedule_samples", "precision")} == {
        "format": 3, "step": 12, "reason": "periodic", "world_size": 2, "batch": 32, "grad_accum": 1,
        "samples_seen": 12 * 64, "samples_in_epoch": 12 * 64, "schedule_samples": 2 * 1024, "precision": "fp32",
    }  # fmt: skip
    shards = {name: size for name, size in record["files"].items() if name.endswith(".distcp")}
    assert sorted(shards) == ["__0_0.distcp", "__1_0.distcp"] and all(shards.values()), "both ranks write a share"
    assert sorted(record["digests"]) == sorted(record["files"]), "every file's CRC-32, to find damage at its own size"
    assert found[16]["reason"] == "epoch end"


def test_an_async_checkpoint_resumes_exactly(finished, tmp_path):
    run, expected = finished
    copy_checkpoints_up_to(run, 12, tmp_path)
    runs = world_of_two(tmp_path, "resumed", EVERY_4)
    assert "[CKPT] resumed from ckpt-00000012: epoch 1 step 12/16 sample 768/1024" in runs[0][1], runs[0][1][-3000:]
    assert result_of(runs) == expected


def test_an_unloadable_newest_checkpoint_falls_back_to_the_one_before(finished, tmp_path):
    run, expected = finished
    resumed = copy_checkpoints_up_to(run, 12, tmp_path)
    metadata = resumed / "checkpoints" / "ckpt-00000012" / ".metadata"
    metadata.write_bytes(b"\0" * metadata.stat().st_size)  # the size its record says, but not DCP's metadata
    # A record without digests, as trainers before them wrote: only the load can find the damage.
    record_path = resumed / "checkpoints" / "ckpt-00000012.json"
    record_path.write_text(json.dumps({k: v for k, v in json.loads(record_path.read_text()).items() if k != "digests"}))
    resumes_from_8_passing_over_12(tmp_path, expected, because="unloadable")


def test_a_newest_checkpoint_damaged_on_disk_at_its_own_size_falls_back_to_the_one_before(finished, tmp_path):
    # A flipped bit, as a failing disk or a bad copy leaves it: the shard keeps its size, and
    # torch.distributed.checkpoint would read the damaged weights without a word.
    run, expected = finished
    resumed = copy_checkpoints_up_to(run, 12, tmp_path)
    flip_a_bit(resumed / "checkpoints" / "ckpt-00000012" / "__1_0.distcp")
    resumes_from_8_passing_over_12(tmp_path, expected, because="__1_0.distcp's CRC-32 is ")


def test_a_full_volume_during_a_write_loses_that_checkpoint_only_and_the_run_says_so(finished, tmp_path):
    # The run directory on a filesystem of its own, full while checkpoint 8 is written (the probe
    # fills it just before rank 0 writes its shard, and frees it after): a real ENOSPC.
    _, expected = finished
    run = tmp_path / "run"
    run.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "ddp-infra-test", str(run)], check=True)
    try:
        runs = world_of_two(tmp_path, "full", EVERY_4, PROBE_FULL_STEP="8")
        assert result_of(runs) == expected, "a checkpoint that cannot be written changes nothing in the training"
        text = runs[0][1]
        assert "[CKPT] could not save ckpt-00000008 (periodic): rank 0: OSError: [Errno 28] No space left on device" in text, text[-3000:]
        assert "the newest checkpoint is still ckpt-00000004; training goes on and the next checkpoint tries again" in text
        assert sorted(records(run)) == [4, 12, 16, 20, 24, 28, 32], "the checkpoints before and after are whole"
        assert not (run / "checkpoints" / "ckpt-00000008").exists(), "the torn one is removed"
        resumed = copy_checkpoints_up_to(run, 12, tmp_path / "resumed")
    finally:
        subprocess.run(["umount", str(run)], check=True)
    runs = world_of_two(resumed.parent, "resumed", EVERY_4)
    assert "[CKPT] resumed from ckpt-00000012:" in runs[0][1], runs[0][1][-3000:]
    assert result_of(runs) == expected


def test_a_rank_killed_during_a_background_write_resumes_from_the_checkpoint_before(finished, tmp_path):
    _, expected = finished
    runs = world_of_two(tmp_path, "killed", EVERY_4, PROBE_KILL_STEP="8", PROBE_KILL_RANK="1")
    assert runs[1][0] == -9, runs[1][1][-3000:]
    assert runs[0][0] not in (0, None), runs[0][1][-3000:]
    run = tmp_path / "run"
    assert sorted(records(run)) == [4], "the checkpoint being written when a rank died does not count"
    torn = run / "checkpoints" / "ckpt-00000008"
    assert torn.is_dir(), "the probe died after writing part of its shard"

    runs = world_of_two(tmp_path, "resumed", EVERY_4)
    assert "[CKPT] resumed from ckpt-00000004:" in runs[0][1], runs[0][1][-3000:]
    assert result_of(runs) == expected
    assert records(run)[8]["files"], "step 8 written again, whole"


def test_checkpoints_by_time_alone(finished, tmp_path):
    _, expected = finished
    # a millisecond: every step outlasts it, so the trigger fires without the test timing anything
    runs = world_of_two(tmp_path, "timed", ["--checkpoint-every", "0", "--checkpoint-every-seconds", "0.001"])
    assert result_of(runs) == expected, "checkpointing changes nothing in the training"
    reasons = {step: record["reason"] for step, record in records(tmp_path / "run").items()}
    timed = [step for step, reason in reasons.items() if reason == "time"]
    assert timed and all(step % 16 for step in timed), reasons
    assert reasons[16] == reasons[32] == "epoch end"
