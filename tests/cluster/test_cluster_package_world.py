"""ddp-infra as a user adopts it: `pip install <repo>` into a fresh virtualenv and a ten-line program of
the user's own (PROGRAM), run by the real `pulumi up` against the test cluster. The program makes its
own Kubernetes provider and hands it to the world; the trainer image reaches the world as another
resource's output (a ConfigMap standing for the program's image build step). The world trains to its
result, and its outputs are the stack's under the world's name."""

from __future__ import annotations

import json
import textwrap

import pytest
import yaml

from cluster_testing import NAMESPACE, NODES, WORKLOAD, delete_namespace, get, summary_line, wait_for_the_job_and_both_ranks_done
from infra_harness import DELETE, stack_config_with
from package_install import fresh_install, package_source
from pulumi_project import PulumiProject

pytestmark = pytest.mark.timeout(900)

PROGRAM = textwrap.dedent(
    '''
    """My training program: my trainer image, as the step that builds it records it, and one DDP world."""
    import pulumi
    import pulumi_kubernetes as k8s
    from ddp_infra import DdpTrainingWorld, DdpTrainingWorldArgs

    settings = pulumi.Config()
    cluster = k8s.Provider("cluster", kubeconfig="")
    built = k8s.core.v1.ConfigMap("trainer-image", data={"image": settings.require("image")}, opts=pulumi.ResourceOptions(provider=cluster))
    world = DdpTrainingWorld("mine", DdpTrainingWorldArgs(config=settings.require_object("world"), image=built.data["image"]),
                             opts=pulumi.ResourceOptions(provider=cluster))
    world.export()
    '''
)
PROJECT_NAME = "my-training"


def test_a_program_of_one_s_own_with_the_installed_package_deploys_a_world_that_trains_to_its_result(cluster, dev_image, tmp_path):
    python = fresh_install(package_source(tmp_path / "source"), tmp_path / "venv")
    program = tmp_path / "program"
    (program / "stacks").mkdir(parents=True)
    (program / "__main__.py").write_text(PROGRAM)
    runtime = {"name": "python", "options": {"virtualenv": str(python.parent.parent)}}
    (program / "Pulumi.yaml").write_text(yaml.safe_dump({"name": PROJECT_NAME, "runtime": runtime, "stackConfigDir": "stacks"}))
    # The dev stack's world, its image's name left out: the program hands the image in.
    world = stack_config_with("dev", kubernetes__renderDir=DELETE, image__name=DELETE)
    assert "name" not in world["image"]
    stack_file = {"config": {f"{PROJECT_NAME}:image": dev_image, f"{PROJECT_NAME}:world": world}}
    (program / "stacks" / "Pulumi.dev.yaml").write_text(yaml.safe_dump(stack_file))

    project = PulumiProject(tmp_path, program=program)
    (tmp_path / "kubeconfig").symlink_to(cluster.kubeconfig)
    project.init_stack("dev")
    try:
        # At preview the image is not known yet (the ConfigMap is not made): the world is planned whole all the same.
        _, preview = project.preview_json("dev")
        planned = {(step["op"], step["urn"].rsplit("::", 1)[1]) for step in preview["steps"]}
        assert {("create", "trainer-image"), ("create", f"mine-{WORKLOAD}"), ("create", "mine-storage-outputs")} <= planned, planned
        up = project.run("up", "--stack", "dev", "--yes", "--skip-preview", "--color", "never")
        print(f"\n[engine] pulumi up of {PROJECT_NAME}: {summary_line(up.output)}")
        outputs = json.loads(project.stack_outputs("dev").stdout)
        assert (outputs["mine.namespace"], outputs["mine.workloadName"], outputs["mine.worldSize"]) == (NAMESPACE, WORKLOAD, NODES)
        assert f"--image {dev_image} " in outputs["mine.resultsCommand"]
        assert outputs["mine.worldState"].startswith("admitted"), outputs["mine.worldState"]  # `up` looked at the world
        template = get(cluster, "job", WORKLOAD, NAMESPACE)["spec"]["template"]["spec"]
        assert [c["image"] for c in template["containers"]] == [dev_image]

        ended, done = wait_for_the_job_and_both_ranks_done(cluster)
        assert ended == "Complete", ended
        assert done["0"]["params_sum"] == done["1"]["params_sum"], done  # one world of two trained together
        state = project.export_state("dev")["deployment"]["resources"]
        providers = [r["urn"].rsplit("::", 1)[1] for r in state if r["type"] == "pulumi:providers:kubernetes"]
        assert providers == ["cluster"], "the world made no provider of its own"
    finally:
        project.run("destroy", "--stack", "dev", "--yes", "--skip-preview", "--color", "never", check=False)
        delete_namespace(cluster, NAMESPACE)  # its claims are retained on delete
