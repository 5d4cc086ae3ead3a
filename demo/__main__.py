"""`python -m demo up | resize N | status | down`: the dev stack trained on the local cluster by the
real `pulumi up`, followed to its result; its size changed while it trains; where it stands; and
everything it made removed. The Makefile's `demo`, `demo-resize`, `demo-status` and `demo-down`."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from typing import Any

from observe.follow import Follower, FollowTimeout
from observe.kubectl import Kubectl, KubectlError
from observe.status import rank0_log, render
from observe.world_state import WorldRef, read_world
from toolchain.cluster import ClusterError, LocalCluster
from trainer.lines import DoneLine

from .cluster import demo_home, ensure_cluster, remove_cluster, started_by_demo
from .outputs import describe, outputs_volume
from .stack import STACK, DemoStack, PulumiFailed, committed_stack_config

POLL_S = 2.0


def say(text: str) -> None:
    print(f"[demo] {text}", flush=True)


def result_words(done: DoneLine) -> str:
    """Rank 0's [DONE] line as the demo says it: its floats at four decimals, the weights' fingerprint left out."""
    return " ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in done.result().items() if k != "params_sum")


def _world(outputs: dict[str, Any]) -> WorldRef:
    return WorldRef(outputs["workloadKind"], outputs["workloadName"], outputs["podSelector"])


def _deployed(cluster_name: str) -> tuple[LocalCluster, DemoStack]:
    cluster = LocalCluster(cluster_name)
    stack = DemoStack(demo_home(cluster_name), cluster.kubeconfig, say)
    if not (stack.exists() and cluster.status()["running"]):
        raise SystemExit(f"[demo] no demo runs on cluster {cluster_name}: start one with `make demo`")
    return cluster, stack


def up(args: argparse.Namespace) -> int:
    cluster = ensure_cluster(args.cluster, committed_stack_config(STACK)["image"]["name"], say)
    stack = DemoStack(demo_home(args.cluster), cluster.kubeconfig, say)
    stack.prepare(cluster.context, args.epochs)
    say(f"pulumi up --stack {STACK} (context {cluster.context}):")
    stack.up()
    outputs = stack.outputs()
    kubectl = Kubectl(outputs["namespace"], kubeconfig=cluster.kubeconfig)
    say(f"following run {outputs['runName']}: a world of {outputs['nodes']} pod(s), {outputs['worldSize']} process(es)")
    try:
        end = Follower(kubectl, _world(outputs), sys.stdout, terminal=sys.stdout.isatty()).follow(args.timeout)
    except FollowTimeout as error:
        say(f"gave up: {error}")
        return 1
    if not end.ok:
        say(f"the run failed: {end.reason}")
        if end.worker_error:
            say("the last failed worker, as rank 0's torchrun reported it:")
            for row in end.worker_error:
                say(f"  {row}")
        say("rank 0's last lines:")
        for row in end.last_lines:
            say(f"  {row}")
        say(f"where it stands: {outputs['statusCommand']} --kubeconfig {cluster.kubeconfig}")
        return 1
    say(f"result: {result_words(end.result)}")
    volume = outputs_volume(kubectl)
    if volume:
        run_dir = volume / outputs["runName"]
        say(f"outputs on this machine (/out/{outputs['runName']}): {run_dir}")
        for row in describe(run_dir):
            say(f"  {row}")
        if (run_dir / "loss.png").is_file():
            say(f"loss curve: {run_dir / 'loss.png'}")
        say(f"TensorBoard: .venv/bin/tensorboard --logdir {run_dir / 'tensorboard'}")
    say(f"status: {outputs['statusCommand']} --kubeconfig {cluster.kubeconfig}")
    say("next: `make demo-resize NODES=3` while it trains, `make demo-down` to remove everything")
    return 0


def resize(args: argparse.Namespace) -> int:
    cluster, stack = _deployed(args.cluster)
    stack.copy_program()
    before = stack.outputs()["nodes"]
    say(f"pulumi config set nodes {args.nodes}")
    stack.set_nodes(args.nodes)
    say(f"pulumi up --stack {STACK}:")
    try:
        stack.up()
    except PulumiFailed:
        stack.set_nodes(before)  # a size the program refused is not left in the stack
        say(f"nodes is {before} again")
        raise
    outputs = stack.outputs()
    kubectl = Kubectl(outputs["namespace"], kubeconfig=cluster.kubeconfig)
    deadline = time.monotonic() + args.timeout
    while True:
        state = read_world(kubectl, _world(outputs))
        if state.ended or state.runs_as(args.nodes):
            break
        if time.monotonic() > deadline:
            say(f"the world of {args.nodes} is not running after {args.timeout:.0f} s: {'; '.join(state.waits())}")
            return 1
        time.sleep(POLL_S)
    say(f"a world of {args.nodes} is {'done' if state.ended else 'running'}; it resumes from the newest checkpoint")
    return 0


def status(args: argparse.Namespace) -> int:
    cluster, stack = _deployed(args.cluster)
    outputs = stack.outputs()
    kubectl = Kubectl(outputs["namespace"], kubeconfig=cluster.kubeconfig)
    world = _world(outputs)
    state = read_world(kubectl, world)
    print(render(world, state, rank0_log(kubectl, world, state)))
    return 0


def down(args: argparse.Namespace) -> int:
    cluster = LocalCluster(args.cluster)
    running = cluster.status()["running"]
    stack = DemoStack(demo_home(args.cluster), cluster.kubeconfig, say)
    made = started_by_demo(args.cluster)
    namespace = stack.outputs()["namespace"] if stack.exists() and running and not made else None
    # A cluster the demo started goes as a whole; on one it reused, the stack is destroyed.
    stack.remove(destroy=namespace is not None)
    say(f"stack {STACK} and its state removed")
    if namespace:
        # the stack keeps the namespace and the claims on destroy, as it does for a user's data
        Kubectl(namespace, kubeconfig=cluster.kubeconfig).run("delete", "namespace", namespace, "--wait=true", "--timeout=300s")
        say(f"namespace {namespace} and its claims deleted; cluster {args.cluster} was running before the demo and still is")
    if made:
        remove_cluster(args.cluster, say)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cluster", default=os.environ.get("DDP_INFRA_CLUSTER", "dev"), help="local cluster name (default dev)")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("up", help="deploy the dev stack to the local cluster and follow the run to its result")
    p.add_argument("--epochs", type=int, default=4, help="epochs of the demo's run (default 4; the first up sets it)")
    p.add_argument("--timeout", type=float, default=3600, help="seconds to follow the run before giving up")
    p = sub.add_parser("resize", help="pulumi config set nodes N, then pulumi up, while it trains")
    p.add_argument("nodes", type=int)
    p.add_argument("--timeout", type=float, default=600, help="seconds to wait for the world of N")
    sub.add_parser("status", help="where the demo's run stands")
    sub.add_parser("down", help="remove the stack, its state, and the cluster if the demo started it")
    args = parser.parse_args()
    # a SIGTERM unwinds like Ctrl-C, so the `kubectl logs -f` it follows with ends too
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    try:
        return {"up": up, "resize": resize, "status": status, "down": down}[args.command](args)
    except (PulumiFailed, ClusterError, KubectlError) as error:
        say(str(error))
        return 1


if __name__ == "__main__":
    sys.exit(main())
