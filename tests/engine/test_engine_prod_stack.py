"""The prod stack, which deploys to a real cluster (no renderDir): with no kubeconfig at all, as on
a laptop or in CI without credentials; with a kubeconfig whose server does not answer; and
against a real API server."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from ddp_infra import access, gang
from ddp_infra.names import WORKLOAD_API_ALPHA, WORKLOAD_API_BETA
from pulumi_project import PulumiProject, changed_steps, resource_type
from toolchain.apiserver import LocalApiServer, free_port

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
    steps = changed_steps(preview)
    assert {step["op"] for step in steps} == {"create"}, [(step["op"], step["urn"]) for step in steps]
    types = [resource_type(step["urn"]) for step in steps]
    assert len(WORKLOAD_TYPES & set(types)) == 1
    assert types.count(PVC_TYPE) == 3, "datasets, outputs and models"


def test_preview_of_prod_without_a_cluster_fails_naming_the_context_and_what_to_do(prod):
    """The provider alone only warns and plans every create; the program refuses before registering."""
    assert not prod.kubeconfig.exists()
    result = prod.preview_diff("prod", check=False)
    assert result.returncode != 0, result.describe()
    output = result.output
    assert "cluster cannot be reached" in output, output
    assert f"no kubeconfig: KUBECONFIG={prod.kubeconfig} does not exist" in output, output
    assert "ddp-infra:kubernetes.context" in output and "ddp-infra:kubernetes.renderDir" in output, output
    assert "Traceback" not in output, output


def test_up_of_prod_with_an_unreachable_cluster_creates_nothing(prod):
    """A kubeconfig whose current context names a server that refuses connections."""
    server = f"https://127.0.0.1:{free_port()}"
    prod.kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "gpu-cluster",
        "contexts": [{"name": "gpu-cluster", "context": {"cluster": "gpu", "user": "admin"}}],
        "clusters": [{"name": "gpu", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "admin", "user": {"token": "unused"}}],
    }))  # fmt: skip
    try:
        up = prod.run("up", "--stack", "prod", "--yes", "--color", "never", check=False)
    finally:
        prod.kubeconfig.unlink()
    assert up.returncode != 0, up.describe()
    assert f"context 'gpu-cluster' (the current context) in KUBECONFIG={prod.kubeconfig}" in up.output, up.output
    assert f"its API server {server} does not answer" in up.output, up.output
    for trace in ("Traceback", "KeyboardInterrupt"):
        assert trace not in up.output, up.output
    resources = prod.export_state("prod")["deployment"].get("resources") or []
    created = [r["urn"] for r in resources if r["type"] != "pulumi:pulumi:Stack"]
    assert not created, created


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


def test_preview_with_the_kubernetes_gang_names_the_workload_api_a_cluster_lacks_and_plans_it_where_served(prod, api_server):
    """`scheduling.gang.scheduler: kubernetes`: refused at preview, naming what is missing, against an
    API server without the Workload API; planned against the local cluster's (Kubernetes 1.37:
    scheduling.k8s.io/v1beta1, a Workload the Job's owner, its uid unknown until it is made) and
    against 1.36's (v1alpha2: its Job controller makes the gang, the stack writes none), the preview
    saying what the scheduler will do."""
    previews = {}
    with prod.stack_file_restored("prod"):
        prod.config_set("prod", "ddp-infra:scheduling.gang.scheduler", "kubernetes", path=True)
        with LocalApiServer(workload_api=False) as without:
            shutil.copyfile(without.kubeconfig, prod.kubeconfig)
            try:
                refused = prod.preview_diff("prod", check=False)
            finally:
                prod.kubeconfig.unlink()
        with LocalApiServer(previous_release=True) as previous:
            for version, server in ((WORKLOAD_API_BETA, api_server), (WORKLOAD_API_ALPHA, previous)):
                shutil.copyfile(server.kubeconfig, prod.kubeconfig)
                try:
                    previews[version] = prod.preview_json("prod", check=False)
                finally:
                    prod.kubeconfig.unlink()
    assert refused.returncode != 0, refused.describe()
    lacks = "it lacks scheduling.k8s.io/v1beta1 workloads, podgroups; scheduling.k8s.io/v1alpha2 workloads, podgroups"
    assert f"the cluster serves no version of the Workload API ({lacks})" in refused.output, refused.output
    assert "GenericWorkload" in refused.output and "--runtime-config=scheduling.k8s.io/v1beta1=true" in refused.output
    assert "nothing was created" in refused.output and "Traceback" not in refused.output, refused.output
    for version, (result, preview) in previews.items():
        assert result.returncode == 0, result.describe()
        _assert_plans_the_whole_stack(preview)
        planned = [resource_type(step["urn"]) for step in changed_steps(preview)]
        assert ("kubernetes:scheduling.k8s.io/v1beta1:Workload" in planned) == (version == WORKLOAD_API_BETA), planned
        said = f"a world of 8: the Kubernetes scheduler ({version}) binds its 8 pods together, or none"
        said_at_preview = [d["message"] for d in preview.get("diagnostics", []) if d["message"].startswith(gang.ADMISSION_PREFIX)]
        assert len(said_at_preview) == 1 and said_at_preview[0].startswith(gang.ADMISSION_PREFIX + said), preview.get("diagnostics")


def _grant(api: LocalApiServer, user: str, resources: dict[str, list[str]]) -> None:
    """A ClusterRole of access.VERBS on `resources` (API group: resources), bound to `user`."""
    rules = [{"apiGroups": [group], "resources": names, "verbs": list(access.VERBS)} for group, names in resources.items()]
    api.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": user}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": user},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]},
    ]}))  # fmt: skip


def test_preview_refuses_credentials_that_may_not_do_what_the_stack_does_naming_each_refusal(prod):
    """An RBAC API server: a user without NetworkPolicy rights, then a token it does not know, are
    refused at preview with what is missing; the same user granted them gets the whole plan."""
    the_stacks_resources = {"": ["namespaces", "persistentvolumeclaims", "services", "serviceaccounts", "secrets"],
                            "apps": ["deployments", "statefulsets"], "batch": ["jobs"], "policy": ["poddisruptionbudgets"]}  # fmt: skip
    with LocalApiServer(users={"alice-token": ("alice", "team")}, rbac=True) as api:
        _grant(api, "alice", the_stacks_resources)
        previews = {}
        for name, token in (("without network policies", "alice-token"), ("unknown token", "expired-token")):
            api.kubeconfig_of(token, prod.kubeconfig)
            try:
                previews[name] = prod.preview_diff("prod", check=False)
            finally:
                prod.kubeconfig.unlink()
        _grant(api, "alice", {**the_stacks_resources, "networking.k8s.io": ["networkpolicies"]})
        api.kubeconfig_of("alice-token", prod.kubeconfig)
        try:
            result, preview = prod.preview_json("prod", check=False)
        finally:
            prod.kubeconfig.unlink()
    refused = previews["without network policies"]
    assert refused.returncode != 0, refused.describe()
    assert "the kubeconfig's current context may not do what the stack does; nothing was created" in refused.output, refused.output
    assert "may not get, create, patch, delete networkpolicies.networking.k8s.io in namespace ml-train" in refused.output, refused.output
    assert "jobs.batch" not in refused.output and "Traceback" not in refused.output, refused.output
    rejected = previews["unknown token"]
    assert rejected.returncode != 0, rejected.describe()
    assert "its credentials are rejected by the API server (expired or revoked?)" in rejected.output and "Unauthorized" in rejected.output
    assert result.returncode == 0, result.describe()
    _assert_plans_the_whole_stack(preview)
