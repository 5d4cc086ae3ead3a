"""Preflight checks against real sockets, a real statvfs and a fake /dev."""

from __future__ import annotations

import os
import random
import socket
import threading
import time

import pytest
from trainer_testing import free_port

from trainer import contract as c
from trainer.pod import preflight
from trainer.pod.preflight import (
    FAIL, OK, WARN, check_gpus, check_shm, choose_interface, own_address, visible_gpus, wait_for_endpoint,
)  # fmt: skip


def listen_later(port: int, delay_s: float) -> threading.Thread:
    """A listener that appears after a delay, as pod 0's store does; it accepts one probe and closes."""

    def serve():
        time.sleep(delay_s)
        with socket.socket() as server:
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind(("127.0.0.1", port))
            server.listen()
            server.settimeout(20)
            conn, _ = server.accept()
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


@pytest.mark.timeout(30)
def test_waits_for_a_port_that_opens_late():
    port = free_port()
    server = listen_later(port, delay_s=1.5)
    lines: list[str] = []
    check = wait_for_endpoint("localhost", port, deadline_s=20, log=lines.append, first_delay_s=0.1, max_delay_s=0.4)
    server.join(5)
    assert check.status == OK, check
    assert any("TCP connect failed" in line for line in lines), "the refused attempts should have been logged"
    assert len(lines) == 1, "one line per distinct error, not one per attempt"


@pytest.mark.timeout(30)
def test_a_master_that_comes_back_is_looked_for_at_least_once_a_second(monkeypatch):
    # A pod re-joining after pod 0's loss waits here while the Job replaces pod 0: a wait that
    # backs off to 5 s found the new pod 0 up to 5 s after it listened (seen on the local cluster).
    port = free_port()
    waits: list[float] = []
    listener = socket.socket()

    def sleep(seconds: float) -> None:  # the schedule is recorded, not slept: the listener opens after 8 waits
        waits.append(seconds)
        if len(waits) == 8:
            listener.bind(("127.0.0.1", port))
            listener.listen()

    monkeypatch.setattr(preflight.time, "sleep", sleep)
    with listener:
        check = wait_for_endpoint("localhost", port, deadline_s=60, log=lambda _: None)
    assert check.status == OK, check
    assert len(waits) == 8 and waits[0] == 0.5 and max(waits) <= 1.0, waits


@pytest.mark.timeout(30)
def test_an_address_that_swallows_connections_is_given_up_on_within_a_second_per_look(monkeypatch):
    # After pod 0's loss its name can still give its old address, where nothing answers a SYN any
    # more: each look waited 3 s for a connection, each second past the new pod 0's start a second
    # the whole world does not train (seen on the local cluster: pod 0 evicted). Here the listener's
    # queue is full, so the kernel drops every further SYN, as a vanished address does.
    monkeypatch.setattr(preflight.time, "sleep", lambda _: None)
    with socket.socket() as full:
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        with socket.create_connection(full.getsockname(), timeout=1):  # fills the queue
            check = wait_for_endpoint("127.0.0.1", full.getsockname()[1], deadline_s=3.5, log=lambda _: None)
    assert check.status == FAIL and "timed out" in check.detail, check
    attempts = int(check.detail.split(" attempt(s)")[0].rsplit(" ", 1)[1])
    assert attempts >= 3, check.detail


@pytest.mark.timeout(30)
def test_a_name_that_resolves_is_not_enough_when_the_port_is_closed():
    check = wait_for_endpoint("localhost", free_port(), deadline_s=1.0, log=lambda _: None, first_delay_s=0.1)
    assert check.status == FAIL
    assert "TCP connect still failing" in check.detail
    assert "pod 0's log" in check.advice


@pytest.mark.timeout(30)
def test_an_unresolvable_master_fails_at_the_deadline_with_dns_advice():
    check = wait_for_endpoint("pod-0.missing.invalid", 29500, deadline_s=1.0, log=lambda _: None, first_delay_s=0.1)
    assert check.status == FAIL
    assert "DNS lookup still failing" in check.detail
    assert c.MASTER_WAIT_TIMEOUT.name in check.advice and "publishes not-ready addresses" in check.advice


def test_the_dns_advice_names_the_names_the_search_path_tried(tmp_path, monkeypatch):
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("search ml.svc.example.internal svc.example.internal\nnameserver 10.0.0.10\noptions ndots:5\n")
    assert preflight.search_domains(str(resolv)) == ["ml.svc.example.internal", "svc.example.internal"]
    monkeypatch.setattr(preflight, "search_domains", lambda: ["ml.svc.example.internal"])
    check = wait_for_endpoint("pod-0.missing.invalid", 29500, deadline_s=0.5, log=lambda _: None, first_delay_s=0.1)
    assert "pod-0.missing.invalid.ml.svc.example.internal" in check.advice


@pytest.mark.timeout(10)
def test_interface_is_the_route_to_the_master():
    check, settings = choose_interface({}, "127.0.0.1", 29500)
    assert check.status == OK
    assert settings == {c.NCCL_SOCKET_IFNAME.name: "lo", c.GLOO_SOCKET_IFNAME.name: "lo"}


@pytest.mark.timeout(10)
def test_an_interface_set_in_the_pod_env_is_kept():
    check, settings = choose_interface({c.NCCL_SOCKET_IFNAME.name: "eth9"}, "127.0.0.1", 29500)
    assert settings == {c.GLOO_SOCKET_IFNAME.name: "lo"}
    both = {c.NCCL_SOCKET_IFNAME.name: "eth9", c.GLOO_SOCKET_IFNAME.name: "eth9"}
    check, settings = choose_interface(both, "127.0.0.1", 29500)
    assert (check.status, settings) == (OK, {})


@pytest.mark.timeout(10)
def test_shm_size_against_the_minimum_and_the_size_asked_for(tmp_path):
    stats = os.statvfs(tmp_path)
    size = stats.f_frsize * stats.f_blocks
    assert check_shm(str(tmp_path), minimum=size).status == OK
    small = check_shm(str(tmp_path), minimum=size + 1)
    assert small.status == WARN and "medium: Memory" in small.advice
    short = check_shm(str(tmp_path), minimum=1, expected=size * 2)
    assert short.status == WARN and c.SHM_SIZE_BYTES.name in short.detail
    assert check_shm(str(tmp_path / "absent")).status == FAIL


@pytest.fixture
def fake_dev(tmp_path):
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "null"):
        (tmp_path / name).touch()
    return str(tmp_path)


@pytest.mark.timeout(10)
def test_visible_gpus_counts_device_nodes_narrowed_by_cuda_visible_devices(fake_dev):
    assert visible_gpus(fake_dev, env={}) == 2
    assert visible_gpus(fake_dev, env={"CUDA_VISIBLE_DEVICES": "1"}) == 1
    assert visible_gpus(fake_dev, env={"CUDA_VISIBLE_DEVICES": ""}) == 0


@pytest.mark.timeout(10)
def test_gpu_check_fails_when_the_pod_lacks_what_it_asked_for(fake_dev):
    assert check_gpus(2, 2, fake_dev, env={}).status == OK
    missing = check_gpus(4, 4, fake_dev, env={})
    assert missing.status == FAIL and "nvidia.com/gpu" in missing.advice
    assert check_gpus(2, 3, fake_dev, env={}).status == FAIL
    assert check_gpus(0, 2, fake_dev, env={}).status == OK
    assert check_gpus(None, 1, fake_dev, env={}).status == OK


@pytest.mark.timeout(10)
def test_the_local_address_is_the_one_that_routes_to_the_master():
    check, address = own_address("127.0.0.1", 29500)
    assert (check.status, address) == (OK, "127.0.0.1")
    check, address = own_address("pod-0.not-yet-published.invalid", 29500)
    assert check.status == OK and "/etc/hosts" in check.detail and address


def test_a_pod_under_the_service_advertises_its_name_there(monkeypatch):
    # what the kubelet's /etc/hosts gives a pod whose subdomain is the headless Service
    monkeypatch.setattr(preflight.socket, "gethostname", lambda: "trainer-3")
    monkeypatch.setattr(preflight.socket, "getfqdn", lambda: "trainer-3.trainer-rdzv.ml.svc.example.internal")
    check, address = own_address("127.0.0.1", 29500, service="trainer-rdzv")
    assert (check.status, address) == (OK, "trainer-3.trainer-rdzv")
    # without the Service as its subdomain, the address that routes to the master
    monkeypatch.setattr(preflight.socket, "getfqdn", lambda: "trainer-3")
    assert own_address("127.0.0.1", 29500, service="trainer-rdzv")[1] == "127.0.0.1"


def test_those_names_put_pod_0_first_in_torchruns_rank_order():
    """c10d numbers the nodes in the sort order of their descriptors: address, then pid."""
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _NodeDesc

    rng = random.Random(0)
    for nodes in (2, 3, 10, 11, 100, 512):
        pods = [_NodeDesc(f"trainer-{i}.trainer-rdzv", rng.randrange(1, 1 << 22), 0) for i in range(nodes)]
        rng.shuffle(pods)
        assert sorted(pods)[0].addr == "trainer-0.trainer-rdzv"


@pytest.mark.timeout(10)
def test_infiniband_asked_for_without_its_devices_fails_with_the_next_step(tmp_path):
    asked = {c.NCCL_IB_DISABLE.name: "0"}
    missing = preflight.check_infiniband(asked, str(tmp_path / "infiniband"))
    assert missing.status == FAIL
    assert str(tmp_path / "infiniband") in missing.detail and f"{c.NCCL_IB_DISABLE.name}=0" in missing.detail
    assert "network.rdmaResources" in missing.advice and "network.infiniband: false" in missing.advice
    (tmp_path / "infiniband").mkdir()
    (tmp_path / "infiniband" / "rdma_cm").touch()
    no_verbs = preflight.check_infiniband(asked, str(tmp_path / "infiniband"))
    assert no_verbs.status == FAIL and "uverbs" in no_verbs.detail
    for name in ("uverbs0", "uverbs1"):
        (tmp_path / "infiniband" / name).touch()
    found = preflight.check_infiniband(asked, str(tmp_path / "infiniband"))
    assert found.status == OK and "uverbs0, uverbs1" in found.detail


@pytest.mark.timeout(10)
def test_infiniband_not_asked_for_needs_no_devices(tmp_path):
    for env in ({}, {c.NCCL_IB_DISABLE.name: "1"}):
        assert preflight.check_infiniband(env, str(tmp_path / "absent")).status == OK
