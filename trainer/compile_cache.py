"""torch.compile's cache kept with the run, on the outputs claim: a world that forms again (a lost pod's
replacement on another node, a resize, a restart) loads the step's compiled graphs instead of compiling them.

torch.compile keeps what it compiled (the step's graphs with their backward, their kernels, Triton's
binaries) in TORCHINDUCTOR_CACHE_DIR, by default in the machine's /tmp: in a pod, gone with the pod.
In `<out>/<run>/compile-cache` every pod of every world of the run shares it: the keys name what was
compiled and for what (torch, the device), and torch writes each entry whole, as the ranks of one
machine share its default directory. A TORCHINDUCTOR_CACHE_DIR the user set is kept.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_DIR_ENV = "TORCHINDUCTOR_CACHE_DIR"


def keep_in(directory: Path) -> Path:
    """Points torch.compile's cache at `directory`, unless the env names another than torch's default (the
    user's own); the directory the cache is in."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir  # free of torch's imports

    current = os.environ.get(CACHE_DIR_ENV)  # importing torch._dynamo writes the default in
    if current and os.path.abspath(current) != os.path.abspath(default_cache_dir()):
        return Path(current)
    os.environ[CACHE_DIR_ENV] = str(directory)
    return directory


def graphs_from_the_cache() -> tuple[int, int]:
    """(loaded from the cache, all) of the graphs torch.compile has made ready in this process, each with its
    backward, as torch counts them."""
    from torch._dynamo.utils import counters

    made = counters["aot_autograd"]
    loaded = made["autograd_cache_hit"]
    return loaded, loaded + made["autograd_cache_miss"] + made["autograd_cache_bypass"]
