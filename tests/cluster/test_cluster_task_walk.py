"""docs/trainer.md's walk "From an empty directory to a running world", run as a newcomer runs it: every
file it shows written and every command line of its bash blocks run, in the doc's order, in one shell
of a user whose home holds a fresh clone of the project (~/ddp-infra), against the local cluster.

The walk is read from the doc itself, so a line that no test runs cannot be added to it: a block whose
first line is `# <path>` is a file the user writes there, a bash block's lines are what the user types.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from new_user import fresh_clone, git, user_environment
from trainer_testing import done_lines, same_result

from cluster_testing import delete_namespace
from toolchain.cluster.local_cluster import LocalCluster

pytestmark = pytest.mark.timeout(1500)

DOC = Path(__file__).resolve().parents[2] / "docs" / "trainer.md"
SECTION = "### From an empty directory to a running world"
WALK_TIMEOUT_S = 1200
STEP = "@@walk-step"


@dataclass
class Step:
    text: str  # the command line, or `write <path>`
    file: tuple[str, str] | None = None  # (path, content) of a file the user writes


def walk_steps() -> list[Step]:
    """The section's blocks in order: a fenced block whose first line is `# <path>` a file, a bash
    block's lines (comments dropped) commands."""
    text = DOC.read_text()
    start = text.index(f"\n{SECTION}\n")
    section = text[start : re.compile(r"\n##+ ").search(text, start + 1).start()]
    steps = []
    for language, body in re.findall(r"```(\w*)\n(.*?)```", section, re.S):
        if language == "bash":
            lines = [line.strip() for line in body.splitlines()]
            steps += [Step(line) for line in lines if line and not line.startswith("#")]
        elif body.startswith("# "):  # the file as shown, its first line a comment in each of the languages
            path = body.partition("\n")[0][2:].strip()
            steps.append(Step(f"write {path}", (path, body)))
    return steps


def script(steps: list[Step]) -> str:
    """One bash script of the walk: a marker before each step, and the first step that fails ends it."""
    parts = []
    for index, step in enumerate(steps):
        parts.append(f"printf '\\n{STEP} {index}\\n'")
        if step.file:
            path, content = step.file
            parts.append(f"cat > {path} <<'WALK_FILE_END'\n{content}WALK_FILE_END")
        else:
            parts.append(step.text)
        parts.append(f"rc=$?; if [ $rc != 0 ]; then printf '\\n{STEP} failed rc=%s\\n' $rc; exit $rc; fi")
    return "\n".join(parts) + "\n"


@dataclass
class Walk:
    steps: list[Step]
    outputs: list[str]  # what each step printed
    home: Path
    clone: Path

    def output_of(self, prefix: str) -> str:
        return next(out for step, out in zip(self.steps, self.outputs) if step.text.startswith(prefix))


@pytest.fixture(scope="module")
def walk(cluster: LocalCluster, tmp_path_factory) -> Walk:
    root = tmp_path_factory.mktemp("task-walk")
    home = root / "home"
    env = user_environment(home, cluster.kubeconfig)
    clone = fresh_clone(root)
    (home / "ddp-infra").symlink_to(clone)
    env["CLUSTER"] = cluster.name  # the doc's `make image` names the local cluster so when it is not dev
    steps = walk_steps()
    log = root / "walk.log"
    with log.open("w") as out:
        shell = subprocess.Popen(["bash", "-c", script(steps)], cwd=home, env=env, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)  # fmt: skip
        try:
            shell.wait(timeout=WALK_TIMEOUT_S)
        finally:
            try:  # whatever the walk left running (a follow, an up), with its shell
                os.killpg(shell.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            shell.wait()
    namespace = "my-task"
    try:
        text = log.read_text(errors="replace")
        outputs = re.split(rf"\n{STEP} \d+\n", text)[1:]
        failed = re.search(rf"\n{STEP} failed rc=(\d+)\n", text)
        ran = len(outputs)
        assert shell.returncode == 0 and not failed, (
            f"the walk's step {ran - 1} failed (`{steps[ran - 1].text}`), exit {shell.returncode}:\n{outputs[-1][-6000:] if outputs else text[-6000:]}"
        )
        yield Walk(steps, outputs, home, clone)
    finally:
        delete_namespace(cluster, namespace)  # the doc's last line does it; a walk that failed first did not


def test_every_step_of_the_walk_ran(walk):
    assert len(walk.outputs) == len(walk.steps) == len(walk_steps())
    written = [step.file[0] for step in walk.steps if step.file]
    assert written == ["my_task/task.py", "pyproject.toml", "Dockerfile", "Pulumi.my-task.yaml"]
    for path in written:
        assert (walk.home / "my-task" / path).is_file()


def test_the_local_world_and_the_clusters_end_with_the_same_result(walk):
    """The local run's rank 0 and the cluster's rank 0, followed to its end: the same world of two, seed
    and data give the same figures, weights included (params_sum)."""
    local = [line for line in done_lines(walk.output_of('PYTHONPATH="$PWD:$DDP_INFRA"')) if line["rank"] == "0"]
    followed = done_lines(walk.output_of('eval "$(pulumi stack output -s my-task kubectlFollowRank0)"'))
    assert len(local) == 1 and len(followed) == 1, (local, followed)
    assert same_result(followed[0]) == same_result(local[0])
    assert followed[0]["run"] == "first" and followed[0]["epochs"] == "4"


def test_up_ends_with_the_world_running_on_the_image_the_walk_built(walk):
    up = walk.output_of("pulumi up -s my-task")
    assert re.search(r"world: (admitted and running \(2/2 pods|finished)", up), up[-3000:]
    built = walk.output_of("make -C")
    assert "[cluster] docker.io/library/my-task:dev on node(s)" in built, built[-3000:]


def test_the_results_copied_home_hold_the_trained_model_that_loads(walk):
    best = walk.clone / "results" / "first" / "best"
    assert (best / "model.json").is_file() and (walk.clone / "results" / "first" / "metrics.jsonl").is_file()
    weights = torch.load(best / "model.pt", weights_only=True)
    assert set(weights) == {"0.weight", "0.bias", "2.weight", "2.bias"}, set(weights)
    assert weights["0.weight"].shape == (32, 1)


def test_destroy_left_the_namespace_to_the_doc_s_last_line_and_the_clone_changed_only_by_its_stack_file(walk):
    assert re.search(r"- \d+ deleted", walk.output_of("pulumi destroy -s my-task"))
    assert 'namespace "my-task" deleted' in walk.output_of("kubectl delete namespace my-task")
    assert git(walk.clone, "status", "--porcelain").splitlines() == ["?? stacks/Pulumi.my-task.yaml"]
