"""`pulumi preview` of the prod stack, which deploys to a real cluster (no renderDir): once with no
cluster at all, as on a laptop or in CI without credentials, and once against a real API server."""

from __future__ import annotations

import shutil

import pytest

from pulumi_project import PulumiProject, resource_type

pytestmark = pytest.mark.timeout(1800)

WORKLOAD_TYPES = {"kubernetes:apps/v1:StatefulSet", "kubernetes:batch/v1:Job"}
PVC_TYPE = "kubernetes:core/v1:PersistentVolumeClaim"


@pytest.fixture(scope="module")
def prod(tmp_path_factory) -> PulumiProject:
    project = PulumiProject(tmp_path_factory.mktemp("prod"))
    project.init_stack("prod")
    assert project.render_dir("prod") is None, "prod deploys to a cluster"
    return project


def _assert_plans_the_whole_stack(preview: dict) -> None:
    steps = preview["steps"]
    assert {step["op"] for step in steps} == {"create"}, [(step["op"], step["urn"]) for step in steps]
    types = [resource_type(step["urn"]) for step in steps]
    assert len(WORKLOAD_TYPES & set(types)) == 1
    assert types.count(PVC_TYPE) == 3, "datasets, outputs and models"


def test_preview_of_prod_without_a_cluster(prod):
    assert not prod.kubeconfig.exists()
    result, preview = prod.preview_json("prod", check=False)
    assert result.returncode == 0, result.describe()
    _assert_plans_the_whole_stack(preview)


def test_preview_of_prod_against_a_real_api_server(prod, api_server):
    shutil.copyfile(api_server.kubeconfig, prod.kubeconfig)
    try:
        result, preview = prod.preview_json("prod", check=False)
    finally:
        prod.kubeconfig.unlink()
    assert result.returncode == 0, result.describe()
    _assert_plans_the_whole_stack(preview)
    unreachable = [d["message"] for d in preview.get("diagnostics", []) if "unreachable" in d["message"]]
    assert not unreachable, "the provider did not reach the API server"
