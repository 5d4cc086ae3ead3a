"""What `pulumi up` waits for and ends with: the world's state in one line (observe.world_line).

Once the workload is created or updated, the program looks at the world every `INTERVAL_S` seconds,
as the status view does, until it reaches `workload.waitFor` (none: one look; admitted: placed by
its queue and the scheduler; running: its pods running) or `workload.waitSeconds` pass, saying each
new reason it waits meanwhile. It ends with the world's line, a diagnostic of the stack's component:
an info where the world got there; a warning with the reason where it did not, or an error
(`workload.waitFailure: error`) that fails `up`. The line is also the `worldState` stack output, which
`pulumi refresh --run-program` looks again for. A preview shows the last deployment's line, so the
diff a reviewer reads does not change with the world's progress.

The provider's own await is not used for this: it ends on what the workload's controller wrote, not
on why its pods do not exist or run, and its Job await restarts its timeout at every event
(pulumi-kubernetes provider/pkg/await/job.go, a time.After inside its loop), so it cannot be bounded.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
from typing import Callable, Optional

import pulumi

from observe import rank0_log
from observe.kubectl import Kubectl, KubectlError
from observe.world_line import Stage, WorldLine, world_line
from observe.world_state import WorldRef, read_world
from trainer.lines import TrainLine

from .reachability import needs_no_cluster
from .world import World

WORLD_STATE_OUTPUT = "worldState"
INTERVAL_S = 2.0
NOT_LOOKED_AT = "not looked at: no cluster (kubernetes.renderDir, or the program under test mocks)"
NOT_DEPLOYED = "known after `pulumi up`"
WANTED = {"none": Stage.WAITING, "admitted": Stage.ADMITTED, "running": Stage.RUNNING}
_LOOK_FAILED = (KubectlError, OSError, subprocess.TimeoutExpired, ValueError)
GENERATED_POD_NAME = re.compile(r"-[a-z0-9]{5}\b(?=\")")  # the random suffix of a Job's pod, quoted in its events


class WorldNotThere(pulumi.RunError):
    """`workload.waitFailure: error`: a RunError, so Pulumi reports the message alone."""


def wait_for_world(
    look: Callable[[], WorldLine], wanted: Stage, bound_s: float, say: Callable[[str], None],
    interval_s: float = INTERVAL_S, clock: Callable[[], float] = time.monotonic,
) -> Optional[WorldLine]:  # fmt: skip
    """Looks until the world reaches `wanted` or fails, or `bound_s` pass; says each new line meanwhile.
    The last line seen, None where no look succeeded (the cluster did not answer)."""
    deadline = clock() + bound_s
    line: Optional[WorldLine] = None
    while True:
        try:
            seen = look()
        except _LOOK_FAILED:
            seen = None
        if seen is not None:
            if seen.reached(wanted) or seen.stage == Stage.FAILED:
                return seen
            if line is None or _gist(seen.text) != _gist(line.text):
                say(f"waiting for the world to be {wanted.name.lower()}: {seen.text}")
            line = seen
        left = deadline - clock()
        if left <= 0:
            return line
        time.sleep(min(interval_s, left))


def _gist(text: str) -> str:
    """A line without the names the controllers generate for each new pod (`trainer-0-lwdkx`): a
    refusal that names the next pod it could not create is the same reason."""
    return GENERATED_POD_NAME.sub("-…", text)


def conclusion(line: Optional[WorldLine], wanted: Stage, bound_s: int) -> tuple[bool, str]:
    """Whether the world got to `wanted`, and `up`'s last line about it."""
    if line is None:
        return False, f"world: not known: the cluster did not answer within {bound_s} s"
    if line.reached(wanted):
        return True, f"world: {line.text}"
    if line.stage == Stage.FAILED:
        return False, f"world: {line.text}"
    return False, f"world: not {wanted.name.lower()} after {bound_s} s: {line.text}"


def world_state(
    world: World, workload: pulumi.CustomResource, last_deployment: pulumi.StackReference, reporter: pulumi.Resource,
    output: str = WORLD_STATE_OUTPUT,
) -> pulumi.Output[str]:
    """The `worldState` output (`output`, of the last deployment at preview); during `up`, the wait and the line that ends it (above)."""
    config = world.config
    if needs_no_cluster(config.kubernetes):
        return pulumi.Output.from_input(NOT_LOOKED_AT)
    if pulumi.runtime.is_dry_run():
        return last_deployment.get_output(output).apply(lambda last: last or NOT_DEPLOYED)
    settings = config.workload
    wanted, bound = WANTED[settings.wait_for], settings.wait_seconds if settings.wait_for != "none" else 0
    kubectl = Kubectl(world.namespace, config.kubernetes.context)
    ref = WorldRef(world.workload_kind, world.workload_name, world.label_selector)

    def look() -> WorldLine:
        state = read_world(kubectl, ref)
        line = world_line(state, world.min_nodes, world.pods)
        if line.stage != Stage.RUNNING or (pod := state.rank0_pod()) is None:
            return line
        train = TrainLine.parse(rank0_log.last_line(kubectl.logs(pod.name, ref.container), TrainLine.TAG) or "")
        return world_line(state, world.min_nodes, world.pods, train.global_step if train else None)

    async def observe(_: object) -> str:
        loop = asyncio.get_running_loop()

        def say(text: str) -> None:
            loop.call_soon_threadsafe(lambda: pulumi.log.info(text, reporter))

        line = await loop.run_in_executor(None, wait_for_world, look, wanted, bound, say)
        there, text = conclusion(line, wanted, bound)
        if there:
            pulumi.log.info(text, reporter)
        elif settings.wait_failure == "error":
            raise WorldNotThere(text)
        else:
            pulumi.log.warn(text, reporter)
        return line.text if line else text

    return workload.id.apply(observe)
