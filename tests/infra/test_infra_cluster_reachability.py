"""A stack that deploys to a cluster checks, before registering anything, that the cluster of its
kubeconfig context answers; the message names the context and what to do. Real kubeconfig files
and real sockets on loopback."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml

from ddp_infra import reachability


def write_kubeconfig(path: Path, servers: dict[str, str], current: str = "") -> Path:
    """A kubeconfig with one context and one cluster per entry of servers (context name: URL)."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": current,
        "contexts": [{"name": name, "context": {"cluster": f"{name}-cluster", "user": "u"}} for name in servers],
        "clusters": [{"name": f"{name}-cluster", "cluster": {"server": url}} for name, url in servers.items()],
        "users": [{"name": "u", "user": {"token": "t"}}],
    }))  # fmt: skip
    return path


@pytest.fixture
def listening():
    """A port on 127.0.0.1 that accepts connections, and one that refuses them."""
    with socket.socket() as server, socket.socket() as closed:
        server.bind(("127.0.0.1", 0))
        server.listen()
        closed.bind(("127.0.0.1", 0))  # bound, never listening: a connect is refused
        yield server.getsockname()[1], closed.getsockname()[1]


def test_the_current_context_of_a_listening_server_is_reachable(tmp_path, monkeypatch, listening):
    up, _ = listening
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "kc", {"dev": f"https://127.0.0.1:{up}"}, "dev")))
    assert reachability.cluster_problem(None) is None


def test_a_refused_connection_names_the_context_and_the_server(tmp_path, monkeypatch, listening):
    up, down = listening
    servers = {"dev": f"https://127.0.0.1:{up}", "prod": f"https://127.0.0.1:{down}"}
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "kc", servers, "dev")))
    problem = reachability.cluster_problem("prod", timeout=2)
    assert problem and "context 'prod' (ddp-infra:kubernetes.context)" in problem
    assert f"https://127.0.0.1:{down} does not answer" in problem


def test_the_first_kubeconfig_of_the_list_that_names_a_context_wins(tmp_path, monkeypatch, listening):
    up, down = listening
    first = write_kubeconfig(tmp_path / "a", {"dev": f"https://127.0.0.1:{up}"}, "dev")
    second = write_kubeconfig(tmp_path / "b", {"dev": f"https://127.0.0.1:{down}"}, "other")
    monkeypatch.setenv("KUBECONFIG", f"{first}:{tmp_path / 'absent'}:{second}")
    assert reachability.cluster_problem(None) is None


@pytest.mark.parametrize("case, expected", [
    ("no-file", "no kubeconfig: KUBECONFIG="),
    ("unknown-context", "context 'staging' (ddp-infra:kubernetes.context) is not in KUBECONFIG="),
    ("no-current-context", "sets no current-context and ddp-infra:kubernetes.context is not set"),
    ("not-yaml", "cannot be read as a kubeconfig"),
])  # fmt: skip
def test_a_kubeconfig_without_the_context_says_which(tmp_path, monkeypatch, listening, case, expected):
    path = tmp_path / "kc"
    context = "staging" if case == "unknown-context" else None
    if case in ("unknown-context", "no-current-context"):
        write_kubeconfig(path, {"dev": f"https://127.0.0.1:{listening[0]}"})
    elif case == "not-yaml":
        path.write_text("contexts: [unclosed")
    monkeypatch.setenv("KUBECONFIG", str(path))
    problem = reachability.cluster_problem(context)
    assert problem and expected in problem, problem


def test_the_default_kubeconfig_is_read_when_kubeconfig_is_unset(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert reachability.cluster_problem(None) == f"no kubeconfig: {tmp_path / '.kube' / 'config'} does not exist"
