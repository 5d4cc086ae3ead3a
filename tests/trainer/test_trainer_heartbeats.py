"""trainer/pod/heartbeats.py on torch's own rendezvous, against a real TCPStore: a participant whose
heartbeat lapsed is dropped by torchrun as before, and the pod's log now says which one and how
stale it was; a participant heard from in time is kept, and nothing is said. Each case runs in a
fresh process, so torch's classes are seen with the change installed."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from trainer_testing import REPO, clean_env

SCENARIO = """
import json, sys
from datetime import datetime, timedelta, timezone
from torch.distributed import TCPStore
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous import dynamic_rendezvous as r
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
from trainer.pod.heartbeats import say_when_a_heartbeat_lapses
say_when_a_heartbeat_lapses(); say_when_a_heartbeat_lapses()  # twice: the second changes nothing
store = TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=10))
backend = C10dRendezvousBackend(store, "heartbeats")
params = RendezvousParameters("c10d", "127.0.0.1", "heartbeats", min_nodes=2, max_nodes=2, keep_alive_interval=1)
handler = r.create_handler(store, backend, params)
now = datetime.now(timezone.utc)
a, b = r._NodeDesc("trainer-0.dev", 7, 0), r._NodeDesc("trainer-1.dev", 7, 0)
state = r._RendezvousState()
state.round, state.complete = 4, True
state.participants = {a: 0, b: 1}
state.last_heartbeats = {a: now - timedelta(seconds=float(sys.argv[2])), b: now - timedelta(seconds=float(sys.argv[1]))}
handler._state_holder._state = state
handler._state_holder.mark_dirty()
handler._state_holder.sync()
print(json.dumps(sorted(node.addr for node in handler._state_holder.state.participants)))
"""


def scenario(heartbeat_age: float, first_age: float = 0) -> tuple[list[str], list[str]]:
    """The participants kept, and the [DDP] lines said, with trainer-1's last heartbeat (and trainer-0's) that old."""
    result = subprocess.run([sys.executable, "-c", SCENARIO, str(heartbeat_age), str(first_age)], env=clean_env(), cwd=REPO,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    *said, kept = result.stdout.strip().splitlines()
    return json.loads(kept), [line for line in said if line.startswith("[DDP]")]


@pytest.mark.parametrize("age", [3.6, 40])
def test_a_participant_whose_heartbeat_lapsed_is_dropped_and_the_log_names_it_with_its_age(age):
    kept, said = scenario(age)
    assert kept == ["trainer-0.dev"]
    assert len(said) == 1, said
    assert said[0].startswith("[DDP] rendezvous round 4: trainer-1.dev (pid 7) counted as gone, its last heartbeat "), said
    assert said[0].endswith(" s old (over 3 s)"), said
    assert abs(float(said[0].split("its last heartbeat ")[1].split()[0]) - age) < 2, said


def test_a_participant_heard_from_in_time_is_kept_and_nothing_is_said():
    assert scenario(1.5) == (["trainer-0.dev", "trainer-1.dev"], [])


def test_both_participants_dropped_are_named_with_the_round_they_were_dropped_from():
    """Dropping the last participant starts the next round: the lines still name the round they left."""
    kept, said = scenario(6, 7)
    assert kept == []
    assert sorted(line.split(" counted as gone")[0] for line in said) == [
        "[DDP] rendezvous round 4: trainer-0.dev (pid 7)", "[DDP] rendezvous round 4: trainer-1.dev (pid 7)",
    ]  # fmt: skip


# Two agents' rendezvous handlers form a world of 2 through torch's own next_rendezvous; then one
# stops its heartbeats, as a lost pod's agent does. What the other counts as nodes waiting (what
# torchrun's agent restarts its workers for), once the lost one's heartbeats have lapsed.
WORLD_LOSES_A_MEMBER = """
import json, os, sys, threading, time
from datetime import timedelta
from torch.distributed import TCPStore
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous import dynamic_rendezvous as r
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
if sys.argv[1] == "changed":
    from trainer.pod.heartbeats import re_form_without_a_gone_member
    re_form_without_a_gone_member(); re_form_without_a_gone_member()  # twice: the second changes nothing
store = TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=10))
params = RendezvousParameters("c10d", "127.0.0.1", "members", min_nodes=2, max_nodes=2, keep_alive_interval=1,
                              keep_alive_max_attempt=3, local_addr="127.0.0.1")  # not the machine's name: no lookup
# each agent with a connection of its own to the store, as each pod has: one connection waiting blocks the other
clients = [TCPStore("127.0.0.1", store.port, is_master=False, timeout=timedelta(seconds=10)) for _ in range(2)]
survivor, lost = (r.create_handler(client, C10dRendezvousBackend(client, "members"), params) for client in clients)
threads = [threading.Thread(target=handler.next_rendezvous) for handler in (survivor, lost)]
[thread.start() for thread in threads]
[thread.join(60) for thread in threads]
before = survivor.num_nodes_waiting()
lost._stop_heartbeats()
time.sleep(5)  # three missed heartbeats, 1 s apart, and a margin
survivor._keep_alive()  # its own heartbeat fresh, whatever held its heartbeat thread back on a busy machine
print(json.dumps({"before": before, "after": survivor.num_nodes_waiting(), "members": len(survivor._state_holder.state.participants)}), flush=True)
os._exit(0)  # the survivor's heartbeat thread would keep the process waiting on the store
"""


def a_world_loses_a_member(torch_as: str) -> dict:
    result = subprocess.run([sys.executable, "-c", WORLD_LOSES_A_MEMBER, torch_as], env=clean_env(), cwd=REPO,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_an_agent_whose_world_lost_a_member_counts_a_node_waiting_and_so_re_forms_the_world():
    """torch alone drops the lost member and counts nothing waiting: its survivors' workers wait on in
    a collective with the lost one. Changed, the survivor counts one, and torchrun restarts its workers.
    (An elastic world's, on three nodes: tests/cluster/test_cluster_nodes.py.)"""
    assert a_world_loses_a_member("torch") == {"before": 0, "after": 0, "members": 1}
    assert a_world_loses_a_member("changed") == {"before": 0, "after": 1, "members": 1}


NAMED = """
import inspect, json
from datetime import timedelta
from torch.distributed import TCPStore
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous import dynamic_rendezvous as r
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
from trainer.pod.heartbeats import name_rendezvous_events_from_the_frame
store = TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=10))
params = RendezvousParameters("c10d", "127.0.0.1", "named", min_nodes=1, max_nodes=1, keep_alive_interval=1)
handler = r.create_handler(store, C10dRendezvousBackend(store, "named"), params)
names = []
r.construct_and_record_rdzv_event = lambda name, **_: names.append(name)

def heartbeats():
    handler._keep_alive()  # what torchrun's keep-alive timer runs every second
    handler._state_holder._record("sync")
    taken, names[:] = list(names), []
    return taken

by_torch = heartbeats()
name_rendezvous_events_from_the_frame()
def no_stack(*_):
    raise AssertionError("inspect.stack() called")
inspect.stack = no_stack
print(json.dumps([by_torch, heartbeats()]))
"""


def test_a_heartbeats_events_are_named_as_torch_names_them_without_inspecting_the_stack():
    result = subprocess.run([sys.executable, "-c", NAMED], env=clean_env(), cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    by_torch, by_frame = json.loads(result.stdout.strip().splitlines()[-1])
    assert by_torch == ["DynamicRendezvousHandler._keep_alive", "_BackendRendezvousStateHolder.heartbeats"], by_torch
    assert by_frame == by_torch
