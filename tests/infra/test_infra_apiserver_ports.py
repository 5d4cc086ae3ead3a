"""The test API server's ports: chosen distinct, and a port another process takes between the
choice and the bind costs a retry, not the module's every test (seen once in `make test`: etcd's
`bind: address already in use`, and 18 tests errored at setup)."""

from __future__ import annotations

import socket

import pytest

from toolchain.apiserver import server
from toolchain.apiserver import LocalApiServer, free_ports

pytestmark = pytest.mark.timeout(180)


def test_ports_chosen_together_are_distinct_and_free():
    ports = free_ports(8)
    assert len(set(ports)) == 8
    for port in ports:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", port))


def test_a_port_taken_before_the_server_binds_it_is_chosen_again(monkeypatch):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    held = taken.getsockname()[1]
    choices = [[held, *free_ports(2)]]  # the first choice gives etcd a port that is in use

    def choose(count: int) -> list[int]:
        return choices.pop(0) if choices else free_ports(count)

    monkeypatch.setattr(server, "free_ports", choose)
    try:
        with LocalApiServer() as api:
            assert api.kubectl("get", "namespaces").returncode == 0
            assert f":{held}" not in api.server and not choices, "the second choice of ports serves"
    finally:
        taken.close()
