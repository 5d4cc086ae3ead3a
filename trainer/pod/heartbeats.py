"""A line in the pod's log when its torchrun counts another pod of the world as gone for a lapsed
rendezvous heartbeat.

torchrun drops a node whose last heartbeat is older than keep_alive_interval x keep_alive_max_attempt
from its copy of the rendezvous state, in whichever agent reads the state (participants, spares and
pods just joining alike), and says so only at DEBUG. Once that copy is written, the world re-forms
without the node. A pod that was lost is meant to go so; a live pod whose heartbeat came late (a
busy node, a slow store) re-forms the world for nothing, and this line tells the two apart.
"""

from __future__ import annotations

from datetime import datetime, timezone

from torch.distributed.elastic.rendezvous import dynamic_rendezvous as rendezvous

from trainer import console


def say_when_a_heartbeat_lapses() -> None:
    """Installs the line into this process's torchrun; installing it again changes nothing."""
    holder = rendezvous._BackendRendezvousStateHolder
    sanitize = holder._sanitize
    if getattr(sanitize, "says_when_a_heartbeat_lapses", False):
        return

    def sanitize_and_say(self) -> None:
        state = self._state
        heard = {node: at for node, at in state.last_heartbeats.items() if node in state.participants}
        round_ = state.round  # the round it is dropped from: dropping the last participant starts the next
        sanitize(self)
        now = datetime.now(timezone.utc)
        allowed = self._settings.keep_alive_interval * self._settings.keep_alive_max_attempt
        for node in (node for node in heard if node not in state.participants):
            console.line(
                f"[DDP] rendezvous round {round_}: {node.addr} (pid {node.pid}) counted as gone, its last heartbeat "
                f"{(now - heard[node]).total_seconds():.1f} s old (over {allowed.total_seconds():g} s)"
            )  # fmt: skip

    sanitize_and_say.says_when_a_heartbeat_lapses = True  # type: ignore[attr-defined]
    holder._sanitize = sanitize_and_say  # type: ignore[method-assign]
