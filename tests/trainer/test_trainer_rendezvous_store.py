"""The rendezvous store in a process of its own: `python -m trainer.pod.rendezvous_store <port>`."""

from __future__ import annotations

import signal
import subprocess
from datetime import timedelta

import pytest
from trainer_testing import REPO, clean_env, free_port, start_store, store_command

from trainer.pod.preflight import interface_addresses

pytestmark = pytest.mark.timeout(90)

@pytest.mark.parametrize(
    "args, expected",
    [
        ([], "expected one argument, the port to listen on (a whole number in 1..65535); got []"),
        (["1", "2"], "expected one argument, the port to listen on (a whole number in 1..65535); got ['1', '2']"),
        (["http"], "the port must be a whole number in 1..65535; got 'http'"),
        (["0"], "the port must be a whole number in 1..65535; got '0'"),
        (["65536"], "the port must be a whole number in 1..65535; got '65536'"),
        (["-5"], "the port must be a whole number in 1..65535; got '-5'"),
    ],
)
def test_a_bad_port_exits_2_naming_the_value_and_what_is_allowed(args, expected):
    result = subprocess.run(store_command(*args), env=clean_env(), cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result
    assert result.stderr == f"[RDZV] usage: python -m trainer.pod.rendezvous_store <port>: {expected}\n"
    assert result.stdout == ""


def test_a_taken_port_exits_1_naming_it(spawn):
    port = free_port()
    start_store(spawn, port)
    result = subprocess.run(store_command(str(port)), env=clean_env(), cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result
    assert f"[RDZV] cannot listen on port {port}:" in result.stderr and "EADDRINUSE" in result.stderr


def test_sigterm_stops_the_store_with_exit_0(spawn):
    port = free_port()
    store = start_store(spawn, port)
    store.popen.send_signal(signal.SIGTERM)
    assert store.wait(30) == 0, store.text()
    assert store.text().splitlines()[-1] == f"[RDZV] SIGTERM: store on port {port} stopped"


def test_a_second_sigterm_while_stopping_changes_nothing(spawn):
    """The kubelet, or a `timeout` that signals the child and its group, may send SIGTERM twice."""
    store = start_store(spawn, free_port())
    store.popen.send_signal(signal.SIGTERM)
    store.popen.send_signal(signal.SIGTERM)
    assert store.wait(30) == 0, store.text()
    assert "Traceback" not in store.text() and "Exception ignored" not in store.text(), store.text()


def test_clients_set_and_get_through_the_store_at_each_of_the_machines_addresses(spawn):
    """torch binds the store's server to the wildcard address, not to the host this process gives
    its own client: other pods reach it at the pod's address (here each address of this machine)."""
    from torch.distributed import TCPStore

    port = free_port()
    store = start_store(spawn, port)
    addresses = ["127.0.0.1", *(ip for name, ip in interface_addresses().items() if not ip.startswith("127."))]
    writer = TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=10))
    writer.set("world", "formed")
    for address in addresses:
        reader = TCPStore(address, port, is_master=False, timeout=timedelta(seconds=10))
        assert reader.get("world") == b"formed", address
        reader.set(f"seen-from/{address}", address)
        assert writer.get(f"seen-from/{address}") == address.encode()
        assert reader.add("members", 1) >= 1
    assert writer.add("members", 0) == len(addresses)
    assert store.popen.poll() is None, store.text()
