"""The torchrun command line for a resolved PodWorld. Pure: no I/O, no torch."""

from __future__ import annotations

import sys
from typing import Mapping, Sequence

from trainer import contract as c
from trainer.pod.env import PodWorld

# torchrun options that shape the world: the entrypoint sets them from the pod env, so a user
# argument repeating one would silently disagree with NNODES / WORLD_SIZE.
_WORLD_FLAGS = (
    "nnodes", "nproc-per-node", "node-rank", "rdzv-backend", "rdzv-endpoint", "rdzv-id", "rdzv-conf",
    "max-restarts", "master-addr", "master-port", "standalone", "local-addr", "shutdown-timeout",
)  # fmt: skip
# torchrun's own options that take a value; knowing them lets us find where the script starts.
_VALUED = {
    "--monitor-interval", "--monitor_interval", "--start-method", "--start_method", "--role", "--log-dir",
    "--log_dir", "-r", "--redirects", "-t", "--tee", "--local-ranks-filter", "--local_ranks_filter",
    "--logs-specs", "--logs_specs", "--event-log-handler", "--event_log_handler",
}  # fmt: skip


DISABLE_SHARED_STORE = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"


class ArgsError(ValueError):
    pass


def torchrun_argv(
    world: PodWorld, user_args: Sequence[str], local_addr: str | None = None, python: str = sys.executable
) -> list[str]:
    """`python -m torch.distributed.run <world flags> <user args>`; user args pass through verbatim.

    local_addr: the address other pods reach this one at (see preflight.own_address); without it
    torchrun advertises the FQDN.
    """
    _reject_world_flags(user_args)
    conf = _rdzv_conf(world)
    argv = [
        python, "-m", "torch.distributed.run",
        f"--nnodes={world.nnodes}",
        f"--nproc-per-node={world.nproc_per_node}",
        f"--rdzv-backend={world.rdzv_backend}",
        f"--rdzv-endpoint={world.rdzv_endpoint}",
        f"--rdzv-id={world.rdzv_id}",
        "--rdzv-conf=" + ",".join(f"{key}={value}" for key, value in conf.items()),
        f"--max-restarts={world.max_restarts}",
        # after SIGTERM the workers get this long to checkpoint before torchrun SIGKILLs them
        f"--shutdown-timeout={world.shutdown_timeout}",
    ]  # fmt: skip
    if local_addr:
        argv.append(f"--local-addr={local_addr}")
    if world.rdzv_backend == "static":
        # only the static backend takes the node rank as given (c10d and etcd assign ranks by arrival)
        argv += [f"--node-rank={world.node_rank}", f"--master-addr={world.master_addr}", f"--master-port={world.master_port}"]
    return argv + list(user_args)


def torchrun_env(world: PodWorld, env: Mapping[str, str]) -> dict[str, str]:
    """The pod env with the resolved node rank written in, and a fresh worker store per restart.

    torchrun parses PET_NODE_RANK as the default of --node-rank whatever the backend, and the
    contract allows NODE_RANK (so its mirror) to be empty when the rank comes from the pod name.
    Only the static backend uses the node rank; for the others the mirror is dropped, since
    torchrun warns about any non-zero one.
    """
    run_env = {**env, c.NODE_RANK.name: str(world.node_rank)}
    # torchrun's c10d backend otherwise gives the workers one store for all restart rounds, where a
    # restarted worker can read a peer's address from the previous round and fail to connect.
    run_env.setdefault(DISABLE_SHARED_STORE, "1")
    if world.rdzv_backend == "static":
        run_env[c.PET_NODE_RANK.name] = str(world.node_rank)
    else:
        run_env.pop(c.PET_NODE_RANK.name, None)
    return run_env


def _rdzv_conf(world: PodWorld) -> dict[str, int]:
    t = world.timeouts
    if world.rdzv_backend == "static":
        return {"timeout": t.join}  # the static backend's only timeout: waiting for all nodes
    conf = {
        "join_timeout": t.join, "last_call_timeout": t.last_call, "close_timeout": t.close,
        # a pod that missed 3 heartbeats is dropped from the rendezvous, so its replacement can join
        "keep_alive_interval": t.keep_alive,
    }  # fmt: skip
    if world.rdzv_backend == "c10d":
        conf["read_timeout"] = t.read
        # Node 0 hosts the store. Said explicitly, because torchrun's guess compares the endpoint
        # with the machine's names, and a pod's hostname is not its headless-Service DNS name.
        conf["is_host"] = int(world.node_rank == 0)
    return conf


def _reject_world_flags(user_args: Sequence[str]) -> None:
    """Only the torchrun options before the training script are torchrun's; the rest belong to it."""
    conflicting = []
    args = iter(user_args)
    for arg in args:
        if not arg.startswith("-"):
            break  # the training script
        if arg in ("-m", "--module", "--no-python", "--no_python"):
            continue
        name = arg.split("=", 1)[0]
        if name.lstrip("-").replace("_", "-") in _WORLD_FLAGS:
            conflicting.append(name)
        elif name in _VALUED and "=" not in arg:
            next(args, None)
    if conflicting:
        raise ArgsError(
            f"the arguments set torchrun's {', '.join(conflicting)}, which the entrypoint sets from the pod env; "
            "change NNODES / NPROC_PER_NODE / RDZV_* in the deployment instead"
        )
