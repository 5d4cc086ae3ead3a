"""ddp-infra as a component package in another Pulumi language: the Pulumi YAML program of
examples/yaml-world runs `pulumi package add` on the package's plugin (provider/), then the real
`pulumi up` deploys its world on the test cluster with the program's own provider and the image as a
ConfigMap's output. The world trains to its result, and the program reads its outputs."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from cluster_testing import REPO, JobAndRanksDone, WORKLOAD, delete_namespace, get, summary_line, wait_for
from package_install import VERSION
from pulumi_project import PulumiProject

pytestmark = pytest.mark.timeout(900)

EXAMPLE = REPO / "examples" / "yaml-world"
PLUGIN = REPO / "provider" / "pulumi-resource-ddp-infra"
NAMESPACE = "yaml-world"


def test_a_yaml_program_adds_the_component_package_and_deploys_a_world_that_trains_to_its_result(cluster, dev_image, tmp_path):
    program = tmp_path / "program"
    program.mkdir()
    shutil.copy2(EXAMPLE / "Pulumi.yaml", program / "Pulumi.yaml")
    project_file = yaml.safe_load((program / "Pulumi.yaml").read_text())
    (plugin,) = project_file["plugins"]["providers"]
    assert (program / plugin["path"]).resolve() != PLUGIN.parent.resolve()  # relative to the example: here, the repository's
    plugin["path"] = str(PLUGIN.parent)
    (program / "Pulumi.yaml").write_text(yaml.safe_dump(project_file, sort_keys=False))

    project = PulumiProject(tmp_path, program=program)
    (tmp_path / "kubeconfig").symlink_to(cluster.kubeconfig)
    added = project.run("package", "add", str(PLUGIN))
    assert "Added package ddp-infra" in added.output, added.describe()
    assert yaml.safe_load((program / "Pulumi.yaml").read_text())["packages"] == {"ddp-infra": f"ddp-infra@{VERSION}"}
    project.init_stack("dev")
    project.run("config", "set", "--stack", "dev", "image", dev_image)
    try:
        up = project.run("up", "--stack", "dev", "--yes", "--skip-preview", "--color", "never")
        print(f"\n[engine] pulumi up of the YAML program: {summary_line(up.output)}")
        outputs = json.loads(project.stack_outputs("dev").stdout)
        assert (outputs["world.namespace"], outputs["world.workloadName"], outputs["world.worldSize"]) == (NAMESPACE, WORKLOAD, 2)
        assert f"--image {dev_image} " in outputs["world.resultsCommand"]
        assert outputs["world.worldState"].startswith("admitted"), outputs["world.worldState"]
        assert outputs["world.claims"]["outputs"]["claim"].startswith(f"{NAMESPACE}/"), outputs["world.claims"]
        assert [c["image"] for c in get(cluster, "job", WORKLOAD, NAMESPACE)["spec"]["template"]["spec"]["containers"]] == [dev_image]
        assert project.kubernetes_providers("dev") == ["cluster"], "the world made none"

        ended = JobAndRanksDone(cluster, NAMESPACE)
        assert wait_for(ended, 600, "the Job to end, both ranks' [DONE] read", interval=0.5) == "Complete"
        assert sorted(ended.done) == ["0", "1"] and ended.done["0"]["params_sum"] == ended.done["1"]["params_sum"], ended.done
    finally:
        project.run("destroy", "--stack", "dev", "--yes", "--skip-preview", "--color", "never", check=False)
        delete_namespace(cluster, NAMESPACE)  # its claims are retained on delete
