"""ddp-infra as a user adopts it: `pip install <repo>` into a fresh virtualenv and a ten-line program of
the user's own (PROGRAM), run by the real `pulumi up` against the test cluster. The program makes its
own Kubernetes provider and hands it to each of its two worlds (two configs of a sweep, in two
namespaces); the trainer image reaches them as another resource's output (a ConfigMap standing for the
program's image build step). Both worlds train side by side to their results, and a change of one
world's `nodes` replaces that world's workload and nothing of the other."""

from __future__ import annotations

import json
import textwrap

import pytest
import yaml

from cluster_testing import JobAndRanksDone, WORKLOAD, delete_namespace, get, summary_line, wait_for
from infra_harness import DELETE, stack_config_with
from package_install import fresh_install, package_source
from pulumi_project import PulumiProject

pytestmark = pytest.mark.timeout(900)

PROGRAM = textwrap.dedent(
    '''
    """My training program: my trainer image, as the step that builds it records it, and a sweep of DDP worlds."""
    import pulumi
    import pulumi_kubernetes as k8s
    from ddp_infra import DdpTrainingWorld, DdpTrainingWorldArgs

    settings = pulumi.Config()
    cluster = k8s.Provider("cluster", kubeconfig="")
    built = k8s.core.v1.ConfigMap("trainer-image", data={"image": settings.require("image")}, opts=pulumi.ResourceOptions(provider=cluster))
    for name, config in settings.require_object("worlds").items():
        world = DdpTrainingWorld(name, DdpTrainingWorldArgs(config=config, image=built.data["image"]), opts=pulumi.ResourceOptions(provider=cluster))
        world.export()
    '''
)
PROJECT_NAME = "my-training"
SWEEP = {"sweep-a": "0.01", "sweep-b": "0.03"}  # each world's namespace, and its learning rate (YAML 1.2 reads an unquoted 1e-2 as a number)
# Four training pods and two rendezvous stores side by side on the node's two CPUs.
SMALL_PODS = {"resources__requests__cpu": "250m", "resources__requests__memory": "1Gi", "resources__limits__memory": "2Gi"}


def world_config(name: str, lr: str, **changes: str) -> dict:
    """The dev stack's world in namespace `name`, its image's name left out: the program hands the image in."""
    args = ["-m", "trainer.train", "smoke", "--epochs", "3", "--batch", "128", "--lr", lr, "--seed", "5"]
    config = stack_config_with("dev", kubernetes__renderDir=DELETE, image__name=DELETE, namespace__name=name, run__name=name,
                               run__args=args, **SMALL_PODS, **changes)  # fmt: skip
    assert "name" not in config["image"]
    return config


def write_stack(program, image: str, **worlds: dict) -> None:
    stack_file = {"config": {f"{PROJECT_NAME}:image": image, f"{PROJECT_NAME}:worlds": worlds}}
    (program / "stacks" / "Pulumi.dev.yaml").write_text(yaml.safe_dump(stack_file))


def test_a_program_of_one_s_own_with_the_installed_package_trains_two_worlds_and_resizes_one_alone(cluster, dev_image, tmp_path):
    python = fresh_install(package_source(tmp_path / "source"), tmp_path / "venv")
    program = tmp_path / "program"
    (program / "stacks").mkdir(parents=True)
    (program / "__main__.py").write_text(PROGRAM)
    runtime = {"name": "python", "options": {"virtualenv": str(python.parent.parent)}}
    (program / "Pulumi.yaml").write_text(yaml.safe_dump({"name": PROJECT_NAME, "runtime": runtime, "stackConfigDir": "stacks"}))
    write_stack(program, dev_image, **{name: world_config(name, lr) for name, lr in SWEEP.items()})

    project = PulumiProject(tmp_path, program=program)
    (tmp_path / "kubeconfig").symlink_to(cluster.kubeconfig)
    project.init_stack("dev")
    try:
        # At preview the image is not known yet (the ConfigMap is not made): each world is planned whole all the same.
        _, preview = project.preview_json("dev")
        planned = {(step["op"], step["urn"].rsplit("::", 1)[1]) for step in preview["steps"]}
        for name in SWEEP:
            assert {("create", f"{name}-{WORKLOAD}"), ("create", f"{name}-storage-outputs"), ("create", f"{name}-namespace")} <= planned, planned
        up = project.run("up", "--stack", "dev", "--yes", "--skip-preview", "--color", "never")
        print(f"\n[engine] pulumi up of {PROJECT_NAME}: {summary_line(up.output)}")
        outputs = json.loads(project.stack_outputs("dev").stdout)
        for name in SWEEP:
            assert (outputs[f"{name}.namespace"], outputs[f"{name}.runName"], outputs[f"{name}.worldSize"]) == (name, name, 2)
            assert f"--image {dev_image} " in outputs[f"{name}.resultsCommand"]
            assert outputs[f"{name}.worldState"].startswith("admitted"), outputs[f"{name}.worldState"]  # `up` looked at each world
            template = get(cluster, "job", WORKLOAD, name)["spec"]["template"]["spec"]
            assert [c["image"] for c in template["containers"]] == [dev_image]
        state = project.export_state("dev")["deployment"]["resources"]
        assert [r["urn"].rsplit("::", 1)[1] for r in state if r["type"] == "pulumi:providers:kubernetes"] == ["cluster"], "the worlds made none"

        # Both train side by side, each to a result of its own (one world of two ranks each).
        worlds = {name: JobAndRanksDone(cluster, name) for name in SWEEP}
        wait_for(lambda: all([world() for world in worlds.values()]) or None, 600, "both worlds' Jobs to end, their ranks' [DONE] read", interval=0.5)
        results = {}
        for name, world in worlds.items():
            assert world() == "Complete" and sorted(world.done) == ["0", "1"], (name, world.done)
            assert world.done["0"]["params_sum"] == world.done["1"]["params_sum"], world.done
            results[name] = world.done["0"]["params_sum"]
        assert results["sweep-a"] != results["sweep-b"], "two configs, two results"

        # One world resized: its workload is replaced, nothing of the other world changes.
        untouched = get(cluster, "job", WORKLOAD, "sweep-a")["metadata"]["uid"]
        resized = get(cluster, "job", WORKLOAD, "sweep-b")["metadata"]["uid"]
        write_stack(program, dev_image, **{"sweep-a": world_config("sweep-a", SWEEP["sweep-a"]), "sweep-b": world_config("sweep-b", SWEEP["sweep-b"], nodes="3")})
        _, preview = project.preview_json("dev")
        changed = {step["urn"].rsplit("::", 1)[1] for step in preview["steps"] if step["op"] not in ("same", "read")}
        assert f"sweep-b-{WORKLOAD}" in changed and not [name for name in changed if name.startswith("sweep-a")], changed
        project.run("up", "--stack", "dev", "--yes", "--skip-preview", "--color", "never")
        assert get(cluster, "job", WORKLOAD, "sweep-a")["metadata"]["uid"] == untouched
        replaced = get(cluster, "job", WORKLOAD, "sweep-b")
        assert replaced["metadata"]["uid"] != resized and replaced["spec"]["parallelism"] == 3
    finally:
        project.run("destroy", "--stack", "dev", "--yes", "--skip-preview", "--color", "never", check=False)
        for name in SWEEP:
            delete_namespace(cluster, name)  # its claims are retained on delete
