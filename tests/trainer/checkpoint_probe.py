"""The real trainer (trainer.train.main), whose background checkpoint writer can die mid-write.

With PROBE_KILL_STEP=<n> and PROBE_KILL_RANK=<r>, rank r writes its shard of checkpoint n, cuts
that file to half its length, and SIGKILLs its whole process from the writer thread: the crash of a
rank in the middle of an asynchronous save, at a step known in advance. With PROBE_FULL_STEP=<n>,
rank 0 fills the filesystem of the checkpoint directory just before it writes its shard of
checkpoint n, and frees it once that write has failed: a volume full during one write. Without them
it is the trainer unchanged.
"""

from __future__ import annotations

import errno
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


def full_while_writing(step: int) -> None:
    write_data = FileSystemWriter.write_data

    def write_on_a_full_volume(self, plan, planner):
        if Path(self.path).name != f"ckpt-{step:08d}" or int(os.environ["RANK"]) != 0:
            return write_data(self, plan, planner)
        filler = Path(self.path).parent / "filler"
        with open(filler, "wb") as file:
            try:
                for size in (1 << 20, 1 << 12, 1):
                    while True:
                        file.write(b"\0" * size)
                        file.flush()
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
        try:
            written = write_data(self, plan, planner)
            written.wait()
        finally:
            filler.unlink()
        return written

    FileSystemWriter.write_data = write_on_a_full_volume


if __name__ == "__main__":
    if "PROBE_KILL_STEP" in os.environ:
        die_while_writing(int(os.environ["PROBE_KILL_STEP"]), int(os.environ["PROBE_KILL_RANK"]))
    if "PROBE_FULL_STEP" in os.environ:
        full_while_writing(int(os.environ["PROBE_FULL_STEP"]))
    sys.exit(train.main(sys.argv[1:]))
