"""One rank of a two-rank Gloo world whose rank 0 dumps its flight recorder while a collective waits
for rank 1, then once it completed: `python flight_recorder_probe.py RANK PORT OUT_DIR`. With `nccl`
for RANK, a world of one on the first GPU and NCCL, which runs its all-reduces and writes its dump
to OUT_DIR/nccl (one GPU holds one NCCL rank: NCCL refuses two ranks on one device).

Rank 0 runs three all-reduces with rank 1, enqueues a fourth that rank 1 has not joined, and writes
`trainer.flight_recorder.dump()` to OUT_DIR/pending; rank 1 joins it once that file is there, and
rank 0 writes a second dump, OUT_DIR/completed, after it completed. torch marks a collective
completed in its recorder a moment after the call returned (seen under load), so rank 0 waits for
the record to catch up before each dump.
"""

from __future__ import annotations

import pickle
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from trainer import flight_recorder

COMPLETED_BEFORE = 3


def recorded_completed(collectives: int, within_s: float = 30) -> None:
    """Waits (bounded) until the recorder counts `collectives` completed in the default group."""
    deadline = time.monotonic() + within_s
    while pickle.loads(flight_recorder.dump())["pg_status"]["0"]["last_completed_collective"] < collectives and time.monotonic() < deadline:
        time.sleep(0.01)


def main(rank: int, port: int, out: Path) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    x = torch.ones(4)
    for _ in range(COMPLETED_BEFORE):
        dist.all_reduce(x)
    if rank == 0:
        recorded_completed(COMPLETED_BEFORE)
        work = dist.all_reduce(x, async_op=True)
        (out / "pending.partial").write_bytes(flight_recorder.dump())
        (out / "pending.partial").rename(out / "pending")
        work.wait()
        recorded_completed(COMPLETED_BEFORE + 1)
        (out / "completed").write_bytes(flight_recorder.dump())
    else:
        deadline = time.monotonic() + 60
        while not (out / "pending").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        dist.all_reduce(x)
    dist.destroy_process_group()


def one_nccl_rank(port: int, out: Path) -> None:
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1, device_id=device)
    x = torch.ones(4, device=device)
    for _ in range(COMPLETED_BEFORE):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    recorded_completed(COMPLETED_BEFORE)
    (out / "nccl").write_bytes(flight_recorder.dump())
    dist.destroy_process_group()


if __name__ == "__main__":
    if sys.argv[1] == "nccl":
        one_nccl_rank(int(sys.argv[2]), Path(sys.argv[3]))
    else:
        main(int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]))
