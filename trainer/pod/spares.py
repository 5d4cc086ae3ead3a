"""torchrun's rendezvous, made to keep a full world's spare pods aside.

torchrun (torch/distributed/elastic/rendezvous/dynamic_rendezvous.py) takes the first --nnodes
(MAX) pods that join a round; a pod that finds the round complete and full goes on its redundancy
list and waits there while the world trains. A pod that finds the round complete but a member
short (a lost pod not yet dropped, a heartbeat late on a busy node) goes on the wait list instead,
and stays there once the round is full again: torchrun moves to the redundancy list only a node in
neither list. Every agent of the full world then sees a node waiting, restarts its workers to let
it in, forms the same full world without it, and sees it again: the world re-forms every second or
two and hardly trains (seen on the local cluster with a spare pod, its replacement arriving while
the world re-formed).

Two changes, both only while the round is complete and full, when no waiting node can be let in:
a node on the wait list moves to the redundancy list, and the world's agents count no node waiting.
"""

from __future__ import annotations

from torch.distributed.elastic.rendezvous import dynamic_rendezvous as rendezvous


def keep_spares_aside() -> None:
    """Installs both changes into this process's torchrun; installing them again changes nothing."""
    join = rendezvous._RendezvousJoinOp.__call__
    if getattr(join, "keeps_spares_aside", False):
        return

    def join_or_stand_aside(self, ctx, deadline):
        if _full(ctx.state, ctx.settings) and ctx.node in ctx.state.wait_list:
            return rendezvous._Action.ADD_TO_REDUNDANCY_LIST
        return join(self, ctx, deadline)

    executor = rendezvous._DistributedRendezvousOpExecutor
    add_to_redundancy_list = executor._add_to_redundancy_list

    def leave_the_wait_list_for_the_redundancy_list(self) -> None:
        self._state.wait_list.discard(self._node)
        add_to_redundancy_list(self)

    handler = rendezvous.DynamicRendezvousHandler
    num_nodes_waiting = handler.num_nodes_waiting

    def nodes_that_can_join(self) -> int:
        waiting = num_nodes_waiting(self)  # synced with the store
        return 0 if _full(self._state_holder.state, self._settings) else waiting

    join_or_stand_aside.keeps_spares_aside = True  # type: ignore[attr-defined]
    rendezvous._RendezvousJoinOp.__call__ = join_or_stand_aside  # type: ignore[method-assign]
    executor._add_to_redundancy_list = leave_the_wait_list_for_the_redundancy_list  # type: ignore[method-assign]
    handler.num_nodes_waiting = nodes_that_can_join  # type: ignore[method-assign]


def _full(state, settings) -> bool:
    return not state.closed and state.complete and len(state.participants) >= settings.max_nodes
