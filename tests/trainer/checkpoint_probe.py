"""The real trainer (trainer.train.main), whose background checkpoint writer can die mid-write.

With PROBE_KILL_STEP=<n> and PROBE_KILL_RANK=<r>, rank r writes its shard of checkpoint n, cuts
that file to half its length, and SIGKILLs its whole process from the writer thread: the crash of a
rank in the middle of an asynchronous save, at a step known in advance. Without them it is the
trainer unchanged.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from torch.distributed.checkpoint import FileSystemWriter

from trainer import train


def die_while_writing(step: int, rank: int) -> None:
    write_data = FileSystemWriter.write_data

    def write_then_die(self, plan, planner):
        written = write_data(self, plan, planner)
        if Path(self.path).name == f"ckpt-{step:08d}" and int(os.environ["RANK"]) == rank:
            written.wait()
            for shard in Path(self.path).glob(f"__{rank}_*.distcp"):
                os.truncate(shard, shard.stat().st_size // 2)
            os.kill(os.getpid(), signal.SIGKILL)
        return written

    FileSystemWriter.write_data = write_then_die


if __name__ == "__main__":
    if "PROBE_KILL_STEP" in os.environ:
        die_while_writing(int(os.environ["PROBE_KILL_STEP"]), int(os.environ["PROBE_KILL_RANK"]))
    sys.exit(train.main(sys.argv[1:]))
