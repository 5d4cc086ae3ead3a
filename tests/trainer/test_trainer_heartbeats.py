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
