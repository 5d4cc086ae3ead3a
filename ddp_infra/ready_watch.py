"""While `pulumi up` waits for the world to be Ready (`workload.waitForReady`), why it waits.

The provider's own message on a timeout says only that the workload did not become ready. So
during an update that deploys to a cluster, a thread of the program looks at the world every
`INTERVAL_S` seconds, as the status view does (observe.world_state: pods not scheduled and the
scheduler's reason, an image not there, a queue that holds the world in its own words), and
each time the answer changes, `pulumi up` prints it as a warning of the stack. It ends with the
program; a look that fails (the cluster busy, a kubectl error) is skipped.
"""

from __future__ import annotations

import subprocess
import threading
from typing import Callable

import pulumi

from observe.kubectl import Kubectl, KubectlError
from observe.world_state import WorldRef, WorldState, read_world

from .reachability import needs_no_cluster
from .world import World

INTERVAL_S = 10.0


def reasons_reported(look: Callable[[], list[str]], report: Callable[[str], None], stop: threading.Event, interval: float) -> None:
    """Until `stop` is set: every `interval` seconds, the reasons the world waits, reported when they changed."""
    last: list[str] = []
    while not stop.wait(interval):
        try:
            reasons = look()
        except (KubectlError, OSError, subprocess.TimeoutExpired, ValueError):
            continue
        if reasons and reasons != last:
            report("the world is not ready yet: " + "; ".join(reasons))
        last = reasons


def not_ready_because(state: WorldState) -> list[str]:
    """Why the world waits, and a workload that failed (the wait then lasts until its timeout)."""
    failed = [f"the workload ended {state.ended}"] if state.ended and state.ended != "Complete" else []
    return failed + state.waits()


def watch_while_waiting(world: World) -> None:
    """Starts the thread when `pulumi up` (not a preview) waits for this world on a cluster."""
    config = world.config
    if not config.workload.wait_for_ready or pulumi.runtime.is_dry_run() or needs_no_cluster(config.kubernetes):
        return
    kubectl = Kubectl(world.namespace, config.kubernetes.context)
    ref = WorldRef(world.workload_kind, world.workload_name, world.label_selector)
    threading.Thread(
        target=reasons_reported,
        args=(lambda: not_ready_because(read_world(kubectl, ref)), pulumi.log.warn, threading.Event(), INTERVAL_S),
        name="ready-watch",
        daemon=True,  # it ends with the program, whatever the provider's wait did
    ).start()
