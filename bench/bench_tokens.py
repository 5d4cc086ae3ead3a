"""Benchmark of preparing the lm task's tokens on this machine (a measurement, not a test).

Side by side in one run, on a generated JSONL corpus (100 MB by default), byte tokenizer:
  - the old path: every document's ids appended to one Python list, then one torch tensor (the
    list-based TokenBlocks the trainer had before the token cache, copied below, not in the trainer);
  - the shard pipeline: `python -m trainer.prepare` writing the memory-mapped uint16 shard;
  - the shard pipeline again, finding its shard in the cache (what every later start costs).
Each case runs in a process of its own, started by a fresh parent that reports its peak RSS
(getrusage RUSAGE_CHILDREN ru_maxrss), so one case's peak never hides another's.
Usage: .venv/bin/python bench/bench_tokens.py [--megabytes N]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# The data path before the token cache (trainer/tasks/lm/data.py at 0363183), run as the trainer ran it: with torch loaded.
OLD_PATH = """
import json, sys
import torch

def read_texts(path, field):
    with open(path, encoding="utf-8") as file:
        for line in file:
            if line.strip():
                yield json.loads(line)[field]

class TokenBlocks:
    def __init__(self, texts, encode, eos_id, seq_len):
        ids = []
        for text in texts:
            ids.extend(encode(text))
            ids.append(eos_id)
        block = seq_len + 1
        usable = len(ids) // block * block
        self.blocks = torch.tensor(ids[:usable], dtype=torch.long).view(-1, block)

blocks = TokenBlocks(read_texts(sys.argv[1], "text"), lambda text: list(text.encode("utf-8")), 256, 128)
print(blocks.blocks.numel())
"""

# Runs one case and reports the peak RSS of its process tree's largest process, in KiB.
PEAK_OF = """
import resource, subprocess, sys
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""

WORDS = ("the pod trains a model on text and writes checkpoints to the volume while every rank reads its "
         "shard of tokens ünïcode 日本語 naïve café 🙂").split()  # fmt: skip


def write_corpus(path: Path, megabytes: int) -> None:
    rng = random.Random(0)
    target = megabytes * 1_000_000
    with open(path, "w", encoding="utf-8") as file:
        while file.tell() < target:
            text = " ".join(rng.choices(WORDS, k=rng.randint(20, 400)))
            file.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")


def measure(command: list[str]) -> tuple[float, int]:
    """Seconds and peak RSS (bytes) of one run of the command."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "PYTHONWARNINGS": "ignore"}
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", PEAK_OF, *command], env=env, cwd=REPO, capture_output=True, text=True)
    seconds = time.monotonic() - started
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    return seconds, int(result.stdout.split()[-1]) * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=100, help="size of the generated JSONL")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-tokens-") as work:
        data = Path(work) / "data"
        data.mkdir()
        write_corpus(data / "train.jsonl", args.megabytes)
        (data / "val.jsonl").write_text(json.dumps({"text": "a tiny validation document"}) + "\n")
        size_mb = (data / "train.jsonl").stat().st_size / 1e6
        prepare = [sys.executable, "-m", "trainer.prepare", "--data-dir", str(data), "--token-cache-dir", str(Path(work) / "cache")]

        old_s, old_rss = measure([sys.executable, "-c", OLD_PATH, str(data / "train.jsonl")])
        new_s, new_rss = measure(prepare)
        cached_s, cached_rss = measure(prepare)

        [marker] = [json.loads(p.read_text()) for p in (Path(work) / "cache").glob("train.jsonl.*.json")]
        token_bytes = marker["count"] * (2 if marker["dtype"] == "uint16" else 4)

    print(f"corpus: {size_mb:.1f} MB JSONL, {marker['count']:,} tokens, token array {token_bytes / 1e6:.0f} MB ({marker['dtype']})")
    print(f"{'case':<34}{'seconds':>9}{'peak RSS MB':>13}")
    for name, seconds, rss in (
        ("old: Python list -> tensor", old_s, old_rss),
        ("new: python -m trainer.prepare", new_s, new_rss),
        ("new, cached: second start", cached_s, cached_rss),
    ):
        print(f"{name:<34}{seconds:>9.2f}{rss / 1e6:>13.0f}")
    print(f"peak RSS, old / new: {old_rss / new_rss:.1f}")
    print(f"time, old / new: {old_s / new_s:.2f}")
    print(f"peak RSS of preparing / token array: {new_rss / token_bytes:.2f} (goal: under 2)")
    print(f"peak RSS of the old path / token array: {old_rss / token_bytes:.1f}")


if __name__ == "__main__":
    main()
