"""`pulumi preview` and `pulumi up` of the dev stack as written: the up renders manifests (the
provider's render-to-directory mode), and every manifest is one a Kubernetes API server accepts."""

from __future__ import annotations

import importlib.metadata
import os
import stat
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import SchemaNotFoundError, latest_version

from pulumi_project import (
    REPO, PulumiProject, changed_steps, installed_plugins, pinned, provider_versions, require_tool, resource_name, resource_type,
)  # fmt: skip
from toolchain.apiserver import LocalApiServer

pytestmark = pytest.mark.timeout(1800)

PROVIDER_TYPE = "pulumi:providers:kubernetes"
WORKLOAD_TYPES = {"kubernetes:apps/v1:StatefulSet", "kubernetes:batch/v1:Job"}
# What the dev stack must contain at the least: a world without any of these cannot train.
REQUIRED_TYPES = {
    "kubernetes:core/v1:Namespace",
    "kubernetes:core/v1:PersistentVolumeClaim",
    "kubernetes:core/v1:Service",
    "kubernetes:core/v1:ServiceAccount",
    "kubernetes:networking.k8s.io/v1:NetworkPolicy",
    "kubernetes:policy/v1:PodDisruptionBudget",
}


def rendered_documents(render_dir: Path) -> dict[Path, list[dict]]:
    return {
        path: [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
        for path in sorted(render_dir.rglob("*.yaml"))
    }


def kubernetes_resources(state: dict) -> list[dict]:
    return [r for r in state["deployment"]["resources"] if r["type"].startswith("kubernetes:")]


def test_preview_of_dev_plans_every_resource_as_a_create(dev):
    steps = changed_steps(dev.preview)
    assert {step["op"] for step in steps} == {"create"}, [(step["op"], step["urn"]) for step in steps]
    types = [resource_type(step["urn"]) for step in steps]
    providers = [resource_name(step["urn"]) for step in steps if resource_type(step["urn"]) == PROVIDER_TYPE]
    # The stack's provider and the retained objects' (the namespace and the claims, rendered apart
    # so that kubectl applies the namespace first); no default provider.
    assert sorted(providers) == ["ddp-k8s", "ddp-k8s-retained"], providers
    assert len(WORKLOAD_TYPES & set(types)) == 1
    assert REQUIRED_TYPES <= set(types), REQUIRED_TYPES - set(types)


def test_up_renders_a_manifest_for_every_kubernetes_resource(dev):
    render_dir = dev.project.render_dir("dev")
    assert render_dir is not None and render_dir.is_dir(), f"no render dir after up:\n{dev.up_output[-3000:]}"
    rendered = {
        (doc["kind"], doc["metadata"].get("namespace"), doc["metadata"]["name"])
        for docs in rendered_documents(render_dir).values()
        for doc in docs
    }
    in_state = {
        (r["outputs"]["kind"], r["outputs"]["metadata"].get("namespace"), r["outputs"]["metadata"]["name"])
        for r in kubernetes_resources(dev.project.export_state("dev"))
    }
    assert in_state, "the state holds no Kubernetes resources"
    assert rendered == in_state


def test_render_dir_is_private_and_ignored_by_git(dev):
    """The provider writes Secrets there in plain text."""
    render_dir = dev.project.render_dir("dev")
    for path in [render_dir, *render_dir.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o077 == 0, f"{path} is readable by others: {oct(mode)}"
    relative = render_dir.relative_to(dev.project.dir) / "1-manifest" / "secret.yaml"
    ignored = subprocess.run(["git", "check-ignore", "-q", str(relative)], cwd=REPO, timeout=30)
    assert ignored.returncode == 0, f"{relative} is not git-ignored in the repository"


def test_rendered_manifests_match_the_kubernetes_openapi_schema(dev):
    """Strict: a field the API does not know is an error, as it is for `kubectl apply`."""
    version = latest_version()
    documents = rendered_documents(dev.project.render_dir("dev"))
    assert documents
    problems = []
    for path, docs in documents.items():
        for doc in docs:
            where = f"{path.name} {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                problems.append(f"{where}: {'.'.join(map(str, error.path))}: {error.message}")
            except SchemaNotFoundError as error:
                problems.append(f"{where}: {error.message}")
    assert not problems, f"against Kubernetes {version}:\n" + "\n".join(problems)


def test_moving_the_project_directory_changes_nothing(dev, tmp_path):
    """A fresh clone elsewhere (another developer, CI) previews the same deployed stack as unchanged."""
    elsewhere = PulumiProject.sharing_backend_of(dev.project, tmp_path)
    _, preview = elsewhere.preview_json("dev")
    changed = [(step["op"], step["urn"]) for step in changed_steps(preview)]
    assert not changed


def _kubectl(api_server, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
    kubectl = require_tool("kubectl", os.environ.get("PATH", ""))
    return subprocess.run(
        [kubectl, "--kubeconfig", api_server.kubeconfig, *args], input=input, capture_output=True, text=True, timeout=300
    )


def test_rendered_manifests_pass_kubectl_apply_dry_run(dev, api_server):
    """What `kubectl apply -f` of the render dir would do, checked by a real API server: the client
    dry run maps every kind; the server dry run also validates, defaults and admits each object."""
    render_dir = dev.project.render_dir("dev")
    documents = [doc for docs in rendered_documents(render_dir).values() for doc in docs]

    client = _kubectl(api_server, "apply", "--dry-run=client", "--recursive", "-f", str(render_dir))
    assert client.returncode == 0, client.stderr
    assert client.stdout.count("(dry run)") == len(documents), client.stdout

    # A server dry run persists nothing, so the namespaces the other objects live in must exist.
    for namespace in [doc for doc in documents if doc["kind"] == "Namespace"]:
        created = _kubectl(api_server, "apply", "-f", "-", input=yaml.safe_dump(namespace))
        assert created.returncode == 0, created.stderr
    server = _kubectl(api_server, "apply", "--dry-run=server", "--recursive", "-f", str(render_dir))
    assert server.returncode == 0, server.stderr
    assert server.stdout.count("(server dry run)") == len(documents), server.stdout
    assert "would violate PodSecurity" not in server.stderr, server.stderr


def test_the_render_dir_applies_in_one_kubectl_apply_on_an_empty_api_server(dev):
    """What the README tells a user to run after `pulumi up -s dev`: the namespace must be created
    before the objects in it, and kubectl applies the files in name order."""
    for binary in ("etcd", "kube-apiserver"):
        require_tool(binary, os.environ.get("PATH", ""))
    render_dir = dev.project.render_dir("dev")
    documents = [doc for docs in rendered_documents(render_dir).values() for doc in docs]
    with LocalApiServer() as empty:
        applied = _kubectl(empty, "apply", "-R", "-f", str(render_dir))
        assert applied.returncode == 0, applied.stdout + applied.stderr
        assert len(applied.stdout.splitlines()) == len(documents), applied.stdout
        kinds = ("Namespace", "Job", "Service")
        stored = _kubectl(empty, "get", "-A", "namespaces,jobs,services", "-o",
                          "jsonpath={range .items[*]}{.kind}/{.metadata.name}{' '}{end}")  # fmt: skip
    assert stored.returncode == 0, stored.stderr
    expected = {f"{doc['kind']}/{doc['metadata']['name']}" for doc in documents if doc["kind"] in kinds}
    assert {name.split("/")[0] for name in expected} == set(kinds) and expected <= set(stored.stdout.split()), stored.stdout


def test_the_provider_that_ran_is_the_release_the_sdk_asks_for(dev):
    """The pin, the installed SDK, the plugin the engine has and what the state records agree."""
    version = pinned("pulumi-kubernetes")
    assert importlib.metadata.version("pulumi-kubernetes") == version
    plugins = installed_plugins(dev.project.pulumi_bin, dev.project.env)
    assert provider_versions(plugins) == [version], plugins
    providers = [r for r in dev.project.export_state("dev")["deployment"]["resources"] if r["type"] == PROVIDER_TYPE]
    assert providers and {r["inputs"]["version"] for r in providers} == {version}, providers


def test_the_file_backend_writes_no_metadata_sidecars_the_self_reference_could_read_half_written(dev):
    """The program reads its own last outputs (a StackReference to itself) while `pulumi up` writes
    the checkpoint. A file backend renames each checkpoint into place, but by default writes a
    `.attrs` sidecar beside it in place; a read that meets it half written fails the whole up with
    `failed to load checkpoint: EOF`. The login the README gives (`?metadata=skip`) writes none."""
    sidecars = sorted(path.relative_to(dev.project.backend) for path in dev.project.backend.rglob("*.attrs"))
    assert not sidecars, sidecars
    assert list(dev.project.backend.rglob("dev.json")), "the up wrote the dev stack's checkpoint"


def test_a_half_written_sidecar_is_what_fails_the_checkpoint_read(tmp_path):
    """The failure the login avoids, reproduced: a backend with sidecars, one of them empty."""
    project = PulumiProject(tmp_path)
    project.env["PULUMI_BACKEND_URL"] = project.backend.as_uri()  # the default login: sidecars written
    project.init_stack("dev")
    (sidecar,) = project.backend.rglob("dev.json.attrs")
    sidecar.write_text("")
    read = project.run("stack", "output", "--stack", "dev", check=False)
    assert read.returncode != 0 and "failed to load checkpoint: EOF" in read.output, read.describe()
