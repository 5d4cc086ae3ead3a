"""What torchrun does with a pod of the world whose rendezvous heartbeats lapsed: a line in the
pod's log, and a world that re-forms at once.

torchrun drops a node whose last heartbeat is older than keep_alive_interval x keep_alive_max_attempt
from its copy of the rendezvous state, in whichever agent reads the state (participants, spares and
pods just joining alike), and says so only at DEBUG. A pod that was lost is meant to go so; a live
pod whose heartbeat came late (a busy node, a slow store) goes for nothing, and the line tells the
two apart.

Each heartbeat torchrun sends (every keep_alive_interval, 1 s by the product's default) records an
event named after the method that sent it, which torch finds with inspect.stack(): a FrameInfo,
with its source lines, for every frame of the thread, twice a heartbeat. That was most of an
agent's CPU while its world trained; the name is now read from the caller's frame alone.

Dropping a member of the world does not end the world: torchrun's agents restart their workers
only for a node waiting to join, or for a worker that failed. The survivors' workers then wait in a
collective for the lost one until something ends them: a spare joining, the hang watch (its floor,
contract.HANG_FLOOR_SECONDS, at least), or the process group's timeout. So an agent whose world has lost a member counts a node
waiting, and restarts its workers at once: the world re-forms without the lost pod (an elastic
world smaller, a world with a spare with it, another waits for the lost pod's replacement).
"""

from __future__ import annotations

import sys
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


def re_form_without_a_gone_member() -> None:
    """Installs the restart into this process's torchrun; installing it again changes nothing."""
    handler = rendezvous.DynamicRendezvousHandler
    next_rendezvous, num_nodes_waiting = handler.next_rendezvous, handler.num_nodes_waiting
    if getattr(num_nodes_waiting, "re_forms_without_a_gone_member", False):
        return

    def next_rendezvous_noting_the_world(self):
        formed = next_rendezvous(self)
        state = self._state_holder.state
        self._world_formed = (state.round, frozenset(state.participants))
        return formed

    def waiting_or_a_member_gone(self) -> int:
        waiting = num_nodes_waiting(self)  # synced with the store: members whose heartbeats lapsed dropped
        round_, members = getattr(self, "_world_formed", (None, frozenset()))
        state = self._state_holder.state
        gone = state.round == round_ and not members.issubset(state.participants)
        return max(waiting, 1) if gone else waiting

    waiting_or_a_member_gone.re_forms_without_a_gone_member = True  # type: ignore[attr-defined]
    handler.next_rendezvous = next_rendezvous_noting_the_world  # type: ignore[method-assign]
    handler.num_nodes_waiting = waiting_or_a_member_gone  # type: ignore[method-assign]


def name_rendezvous_events_from_the_frame() -> None:
    """Installs the cheaper naming into this process's torchrun: the name inspect.stack()[depth].function
    gave, read from that frame alone."""

    def get_method_name(depth: int = 2) -> str:
        try:
            return sys._getframe(depth).f_code.co_name
        except ValueError:  # a stack shallower than `depth`, as torch's own says
            return "no_method_name"

    rendezvous.get_method_name = get_method_name
