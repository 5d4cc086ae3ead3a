"""Tokenize the lm task's corpus into its token cache ahead of training: `python -m trainer.prepare [lm flags]`.

It takes the lm task's data and tokenizer flags (--data-dir, --train-file, --val-file, --text-field,
--token-cache-dir, --model-local-dir / --model-id / --tokenizer-local-dir, --local-files-only /
--allow-download), so training with the same flags finds these shards and tokenizes nothing. Run it
once per corpus, e.g. from a Job or a pod's shell; training prepares what is missing anyway (one
process tokenizes, the others wait), so this is for corpora large enough to prepare before the
GPUs are held.
"""

from __future__ import annotations

import argparse
import sys

from trainer.tasks.lm import corpus


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.prepare", description=__doc__.splitlines()[0])
    corpus.add_arguments(parser)
    args = parser.parse_args(argv)
    for shard, prepared in corpus.prepare_shards(args, corpus.tokenizer_of(args)):
        if not prepared:
            marker = shard.marker()
            print(f"[DATA] {marker['source']}: {marker['count']} tokens ({marker['dtype']}) cached in {shard.tokens_path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
