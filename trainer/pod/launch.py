"""The torchrun command line for a resolved PodWorld. Pure: no I/O, no torch."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Mapping, Sequence

from trainer import contract as c
from trainer.pod.pod_world import PodWorld

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

# torchrun runs in this module (trainer/pod/agent.py), which first forks the workers' fork server
# from itself (trainer/pod/fork_server.py), and each worker runs WORKER_SCRIPT in a process forked
# from it: torch is imported once per pod, not in every worker at every restart of the world.
AGENT_MODULE = "trainer.pod.agent"
WORKER_SCRIPT = Path(__file__).with_name("worker.py").resolve()
# The agent's own first argument: import, start the fork server, then hold back until the
# entrypoint writes GO on its stdin; at the end of its stdin without one, it exits.
AWAIT_START, GO = "--await-start", "go"
# The agent's exit code when it waited as a spare (SPARE_PODS) until the world it waited for ended
# and closed its rendezvous: nothing failed, and nothing of this pod's succeeded.
SPARE_UNUSED = 75
# What the fork server imports: torch, what every worker imports on its way to its first step
# (torch._dynamo: DDP's constructor and an optimizer's first step import it, about a CPU-second),
# and the training module where it is this product's own, with what its rank 0 imports to track
# the run (a user's module may touch the GPU as it is imported, and a forked process cannot use a
# GPU its parent initialised; none of these queries a device or starts a thread as it is imported).
_EVERY_WORKERS = ["torch", "torch._dynamo"]
_OWN_TRACKING = ["torch.utils.tensorboard"]
_OWN_MODULES = "trainer."
_NOT_PYTHON = ("--no-python", "--no_python", "--run-path", "--run_path")
_START_METHOD = ("--start-method", "--start_method")


class ArgsError(ValueError):
    pass


def torchrun_argv(
    world: PodWorld, user_args: Sequence[str], local_addr: str | None = None, python: str = sys.executable
) -> list[str]:
    """`python -m trainer.pod.agent <world flags> <user args>`, torchrun's command line; the user's
    torchrun options pass through verbatim, and their script (or -m module) with its arguments
    after WORKER_SCRIPT, which runs it in each worker.

    local_addr: the address other pods reach this one at (see preflight.own_address); without it
    torchrun advertises the FQDN.
    """
    options, module, target = _split(user_args)
    _reject_world_flags(options)
    conf = _rdzv_conf(world)
    argv = [
        python, "-m", AGENT_MODULE,
        f"--nnodes={world.nnodes_text}",
        f"--nproc-per-node={world.nproc_per_node}",
        f"--rdzv-backend={world.rdzv_backend}",
        f"--rdzv-endpoint={world.rdzv_endpoint}",
        f"--rdzv-id={world.rdzv_id}",
        "--rdzv-conf=" + ",".join(f"{key}={value}" for key, value in conf.items()),
        f"--max-restarts={world.max_restarts}",
        # after SIGTERM the workers get this long to checkpoint before torchrun SIGKILLs them
        f"--shutdown-timeout={world.shutdown_timeout}",
        "--start-method=forkserver",  # before the user's options: theirs, later, wins
    ]  # fmt: skip
    if local_addr:
        argv.append(f"--local-addr={local_addr}")
    if world.rdzv_backend == "static":
        # only the static backend takes the node rank as given (c10d and etcd assign ranks by arrival)
        argv += [f"--node-rank={world.node_rank}", f"--master-addr={world.master_addr}", f"--master-port={world.master_port}"]
    if any(option.split("=", 1)[0] in _NOT_PYTHON for option in options):
        return argv + list(user_args)
    return argv + options + ["--run-path", str(WORKER_SCRIPT), *(["-m"] if module else []), *target]


def worker_preload(agent_args: Sequence[str]) -> list[str]:
    """The modules the workers' fork server holds, torch first (the agent imports it before it forks
    the server), from the agent's arguments (those after `-m trainer.pod.agent`); [] where no worker
    is forked: the user's command is not Python, or their own start method, the last given, starts
    the workers."""
    options, _, target = _split(agent_args)
    if target[:1] != [str(WORKER_SCRIPT)]:
        return []
    methods = [option.split("=", 1)[1] if "=" in option else options[at + 1]
               for at, option in enumerate(options) if option.split("=", 1)[0] in _START_METHOD]  # fmt: skip
    if methods[-1:] != ["forkserver"]:
        return []
    after = target[1:]
    own = after[:1] == ["-m"] and len(after) > 1 and after[1].startswith(_OWN_MODULES)
    return [*_EVERY_WORKERS, after[1], *_OWN_TRACKING] if own else list(_EVERY_WORKERS)


def held_back(argv: Sequence[str]) -> list[str]:
    """torchrun_argv's command line, its agent holding back until it is told to go (AWAIT_START)."""
    agent = list(argv).index(AGENT_MODULE) + 1
    return [*argv[:agent], AWAIT_START, *argv[agent:]]


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
        # a pod that missed this many heartbeats is dropped from the rendezvous, so its replacement can join
        "keep_alive_interval": t.keep_alive, "keep_alive_max_attempt": t.keep_alive_max_attempts,
    }  # fmt: skip
    if world.rdzv_backend == "c10d":
        conf["read_timeout"] = t.read
        # Said explicitly, because torchrun's guess compares the endpoint with the machine's names,
        # and a pod's hostname is not its headless-Service DNS name.
        conf["is_host"] = int(world.hosts_rendezvous)
    return conf


def _split(user_args: Sequence[str]) -> tuple[list[str], bool, list[str]]:
    """torchrun's own options (those before the training script), whether the script is a module
    (-m), and the script with its arguments, which belong to it."""
    options: list[str] = []
    module = False
    args = list(user_args)
    at = 0
    while at < len(args) and args[at].startswith("-"):
        arg = args[at]
        if arg in ("-m", "--module"):
            module = True
        else:
            options.append(arg)
            if arg in _VALUED and at + 1 < len(args):
                at += 1
                options.append(args[at])
        at += 1
    return options, module, args[at:]


def _reject_world_flags(options: Sequence[str]) -> None:
    conflicting = [name for option in options if option.startswith("-")
                   and (name := option.split("=", 1)[0]).lstrip("-").replace("_", "-") in _WORLD_FLAGS]  # fmt: skip
    if conflicting:
        raise ArgsError(
            f"the arguments set torchrun's {', '.join(conflicting)}, which the entrypoint sets from the pod env; "
            "change NNODES / NPROC_PER_NODE / RDZV_* in the deployment instead"
        )
