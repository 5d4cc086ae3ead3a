"""ddp-infra as a user adopts it: `pip install <repo>` into a fresh virtualenv and the example program of
one's own (examples/own-cluster: its program and its local stack file, as they are), run by the real
`pulumi up` against the test cluster. The program makes its own Kubernetes provider and hands it to
each of its two worlds (two configs of a sweep, in two namespaces); the trainer image reaches them as
another resource's output (a ConfigMap standing for the program's image build step). Both worlds
train side by side to their results, and a change of one world's `nodes` replaces that world's
workload and nothing of the other."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from cluster_testing import REPO, JobAndRanksDone, WORKLOAD, delete_namespace, get, summary_line, wait_for
from package_install import fresh_install, package_source
from pulumi_project import PulumiProject

pytestmark = pytest.mark.timeout(900)

EXAMPLE = REPO / "examples" / "own-cluster"
STACK = "local"
STACK_FILE = f"stacks/Pulumi.{STACK}.yaml"
SWEEP = ["sweep-a", "sweep-b"]  # the example's worlds, each in the namespace of its name


def example_program(root, venv) -> tuple:
    """The example's files in `root`, its Pulumi.yaml's virtualenv the fresh one; its project name and stack config."""
    root.mkdir()
    for name in ("__main__.py", "Pulumi.yaml", STACK_FILE):
        (root / name).parent.mkdir(exist_ok=True)
        shutil.copy2(EXAMPLE / name, root / name)
    project = yaml.safe_load((root / "Pulumi.yaml").read_text())
    project["runtime"]["options"]["virtualenv"] = str(venv)
    (root / "Pulumi.yaml").write_text(yaml.safe_dump(project))
    return project["name"], yaml.safe_load((root / STACK_FILE).read_text())


def test_a_program_of_one_s_own_with_the_installed_package_trains_two_worlds_and_resizes_one_alone(cluster, dev_image, tmp_path):
    python = fresh_install(package_source(tmp_path / "source"), tmp_path / "venv")
    program = tmp_path / "program"
    name, stack_file = example_program(program, python.parent.parent)
    config = stack_file["config"]
    config[f"{name}:image"] = dev_image  # the image the test cluster holds
    worlds = config[f"{name}:worlds"]
    assert sorted(worlds) == SWEEP, "the example's sweep"
    (program / STACK_FILE).write_text(yaml.safe_dump(stack_file))

    project = PulumiProject(tmp_path, program=program)
    (tmp_path / "kubeconfig").symlink_to(cluster.kubeconfig)
    project.init_stack(STACK)
    try:
        # At preview the image is not known yet (the ConfigMap is not made): each world is planned whole all the same.
        _, preview = project.preview_json(STACK)
        planned = {(step["op"], step["urn"].rsplit("::", 1)[1]) for step in preview["steps"]}
        for world in SWEEP:
            assert {("create", f"{world}-{WORKLOAD}"), ("create", f"{world}-storage-outputs"), ("create", f"{world}-namespace")} <= planned, planned
        up = project.run("up", "--stack", STACK, "--yes", "--skip-preview", "--color", "never")
        print(f"\n[engine] pulumi up of {name}: {summary_line(up.output)}")
        outputs = json.loads(project.stack_outputs(STACK).stdout)
        for world in SWEEP:
            assert (outputs[f"{world}.namespace"], outputs[f"{world}.runName"], outputs[f"{world}.worldSize"]) == (world, world, 2)
            assert f"--image {dev_image} " in outputs[f"{world}.resultsCommand"]
            assert outputs[f"{world}.worldState"].startswith("admitted"), outputs[f"{world}.worldState"]  # `up` looked at each world
            template = get(cluster, "job", WORKLOAD, world)["spec"]["template"]["spec"]
            assert [c["image"] for c in template["containers"]] == [dev_image]
        assert project.kubernetes_providers(STACK) == ["cluster"], "the worlds made none"

        # Both train side by side, each to a result of its own (one world of two ranks each).
        ended = {world: JobAndRanksDone(cluster, world) for world in SWEEP}
        wait_for(lambda: all([end() for end in ended.values()]) or None, 600, "both worlds' Jobs to end, their ranks' [DONE] read", interval=0.5)
        results = {}
        for world, end in ended.items():
            assert end() == "Complete" and sorted(end.done) == ["0", "1"], (world, end.done)
            assert end.done["0"]["params_sum"] == end.done["1"]["params_sum"], end.done
            results[world] = end.done["0"]["params_sum"]
        assert results["sweep-a"] != results["sweep-b"], "two learning rates, two results"

        # One world resized: its workload is replaced, nothing of the other world changes.
        untouched = get(cluster, "job", WORKLOAD, "sweep-a")["metadata"]["uid"]
        resized = get(cluster, "job", WORKLOAD, "sweep-b")["metadata"]["uid"]
        worlds["sweep-b"]["nodes"] = 3
        (program / STACK_FILE).write_text(yaml.safe_dump(stack_file))
        _, preview = project.preview_json(STACK)
        changed = {step["urn"].rsplit("::", 1)[1] for step in preview["steps"] if step["op"] not in ("same", "read")}
        assert f"sweep-b-{WORKLOAD}" in changed and not [name for name in changed if name.startswith("sweep-a")], changed
        project.run("up", "--stack", STACK, "--yes", "--skip-preview", "--color", "never")
        assert get(cluster, "job", WORKLOAD, "sweep-a")["metadata"]["uid"] == untouched
        replaced = get(cluster, "job", WORKLOAD, "sweep-b")
        assert replaced["metadata"]["uid"] != resized and replaced["spec"]["parallelism"] == 3
    finally:
        project.run("destroy", "--stack", STACK, "--yes", "--skip-preview", "--color", "never", check=False)
        for world in SWEEP:
            delete_namespace(cluster, world)  # its claims are retained on delete
