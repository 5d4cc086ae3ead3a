"""A training script that says how its process started: `python fork_probe.py <exit status>`.

It prints one `[FORK]` line: whether torch and torch._dynamo (which DDP and the optimizers
import on first use) were imported before the script ran, how many objects it inherited frozen
out of the garbage collector's reach, its process name, and its parent's name and command line;
then it exits with the status it was given.
"""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

torch_before = "torch" in sys.modules
dynamo_before = "torch._dynamo" in sys.modules
frozen = gc.get_freeze_count()
parent = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
parent_name = Path(f"/proc/{os.getppid()}/comm").read_text().strip()
name = Path("/proc/self/comm").read_text().strip()
line = f"[FORK] rank={os.environ.get('RANK')} dynamo_before={dynamo_before} frozen={frozen} torch_before={torch_before} name={name} argv={sys.argv[1:]} parent_name={parent_name} parent={parent}"
sys.stdout.write(line + "\n")  # one write: the workers share stdout
sys.stdout.flush()
sys.exit(int(sys.argv[1]))
