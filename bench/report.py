"""How the benchmark scripts print their figures (a title line, then name and value in two columns),
and how the GPU scripts start."""

from __future__ import annotations

import argparse


def print_table(title: str, rows: list[tuple[str, str]]) -> None:
    width = max(len(name) for name, _ in rows)
    print(title)
    for name, value in rows:
        print(f"  {name:<{width}}  {value:>12}")


def on_a_gpu(script: str) -> bool:
    """Whether a GPU script has a CUDA device to measure on, once it has said which torch and GPU
    it runs on, or why there is nothing to measure."""
    try:
        import torch
    except ImportError:
        print(f"{script}: torch is not installed; nothing to measure")
        return False
    if not torch.cuda.is_available():
        print(f"{script}: no CUDA device here; nothing to measure")
        return False
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}", flush=True)
    return True


def gpu_repeats(doc: str, script: str, default: int = 2) -> int | None:
    """A GPU script's `--repeats` where it has a CUDA device (on_a_gpu); None where it has none."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=default)
    args = parser.parse_args()
    return args.repeats if on_a_gpu(script) else None
