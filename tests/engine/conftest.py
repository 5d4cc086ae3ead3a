"""Engine tests: the program run by the real Pulumi CLI, engine and Kubernetes provider.

The expensive steps run once and are shared: one `pulumi up` of the dev stack as written, from
which the config-change previews start.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import pytest

from pulumi_project import PulumiProject, require_tool, toolchain_path
from scripts import preview_diff
from toolchain.apiserver import LocalApiServer

@dataclass
class DeployedStack:
    project: PulumiProject
    stack: str
    preview: dict  # `pulumi preview --json` of the stack before its first `up`
    up_output: str


@pytest.fixture(scope="session")
def dev(tmp_path_factory) -> DeployedStack:
    """The dev stack as the repository writes it, previewed and then brought up (render mode)."""
    project = PulumiProject(tmp_path_factory.mktemp("dev"))
    project.init_stack("dev")
    _, preview = project.preview_json("dev")
    up = project.up("dev")
    return DeployedStack(project, "dev", preview, up.output)


@dataclass
class ScaledPreview:
    dev_nodes: int  # what the dev stack file says
    nodes: int  # what the preview scales it to
    preview: dict  # `pulumi preview --json`: steps that are not `same`, and changeSummary
    diff_text: str  # `pulumi preview --diff`, as a reviewer reads it
    comment: preview_diff.Preview  # what scripts/preview_diff.py made of its own preview


@pytest.fixture(scope="session")
def scaled_to_64(dev) -> ScaledPreview:
    """`pulumi config set nodes 64` on the deployed dev stack, previewed three ways."""
    dev_nodes, nodes = int(dev.project.stack_config("dev")["ddp-infra:nodes"]), 64
    with dev.project.config_changed("dev", nodes=str(nodes)):
        _, preview = dev.project.preview_json("dev")
        diff = dev.project.preview_diff("dev")
        comment = preview_diff.run_preview("dev", dev.project.dir, 900, env=dev.project.env)
    return ScaledPreview(dev_nodes, nodes, preview, diff.stdout, comment)


@pytest.fixture(scope="session")
def api_server() -> Iterator:
    """A real kube-apiserver (with etcd) on loopback, stopped at the end of the session."""
    for binary in ("etcd", "kube-apiserver"):
        require_tool(binary, toolchain_path())
    with LocalApiServer() as server:
        yield server
