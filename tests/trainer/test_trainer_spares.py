"""trainer/pod/spares.py on torch's own rendezvous, against a real TCPStore: a node on the wait list
of a complete, full round moves to the redundancy list, and the world's agents count it as no node
waiting; torch alone leaves it waiting, and the full world restarts for it again and again. Each
case runs in a fresh process, so torch's classes are seen with and without the change."""

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
if sys.argv[1] == "changed":
    from trainer.pod.spares import keep_spares_aside
    keep_spares_aside(); keep_spares_aside()  # twice: the second changes nothing
store = TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=10))
backend = C10dRendezvousBackend(store, "spares")
params = RendezvousParameters("c10d", "127.0.0.1", "spares", min_nodes=int(sys.argv[2]), max_nodes=2)
handler = r.create_handler(store, backend, params)
now = datetime.now(timezone.utc)
a, b, spare = (r._NodeDesc("10.0.0.%d" % i, 1, 0) for i in (1, 2, 3))
state = r._RendezvousState()
state.round, state.complete = 1, True
state.participants = {a: 0, b: 1} if sys.argv[3] == "full" else {a: 0}
state.wait_list = {spare}
state.last_heartbeats = {a: now, b: now, spare: now}
handler._state_holder._state = state
handler._state_holder.mark_dirty()
handler._state_holder.sync()
waiting = handler.num_nodes_waiting()
action = r._RendezvousJoinOp()(r._RendezvousContext(spare, handler._state_holder.state, handler._settings), float("inf"))
executor = r._DistributedRendezvousOpExecutor(spare, handler._state_holder, handler._settings)
if action == r._Action.ADD_TO_REDUNDANCY_LIST:
    executor._state = handler._state_holder.state
    executor._add_to_redundancy_list()
    handler._state_holder.mark_dirty()
    handler._state_holder.sync()
held = handler._state_holder.state
print(json.dumps({"waiting": waiting, "action": action.name, "wait_list": len(held.wait_list), "redundancy_list": len(held.redundancy_list)}))
"""


def scenario(torch_as: str, min_nodes: int, round_: str) -> dict:
    result = subprocess.run([sys.executable, "-c", SCENARIO, torch_as, str(min_nodes), round_], env=clean_env(),
                            cwd=REPO, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("min_nodes", [2, 1])  # a world of 2 pods, and an elastic 1:2 at its maximum
def test_a_node_waiting_for_a_full_world_stands_aside_as_a_spare_instead_of_restarting_it(min_nodes):
    assert scenario("torch", min_nodes, "full") == {"waiting": 1, "action": "SYNC", "wait_list": 1, "redundancy_list": 0}
    assert scenario("changed", min_nodes, "full") == {"waiting": 0, "action": "ADD_TO_REDUNDANCY_LIST", "wait_list": 0, "redundancy_list": 1}


def test_a_node_waiting_for_a_world_with_room_still_waits_to_join_it():
    """A member short (an elastic world below its maximum, or a lost pod's place): the node waits,
    counted, and the world restarts to let it in, as with torch alone."""
    assert scenario("changed", 1, "short") == scenario("torch", 1, "short") == {
        "waiting": 1, "action": "SYNC", "wait_list": 1, "redundancy_list": 0,
    }  # fmt: skip
