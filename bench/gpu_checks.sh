#!/usr/bin/env bash
# Everything a lent GPU measures, in one run of bounded steps, each step's output kept in OUT_DIR:
# NCCL's flight recorder dump, the step's profile against the reference loop's, the throughput
# ratio, MFU and peak memory with each difference priced on its own (--ablate) and the trainer's
# step in CUDA graphs (--compile-mode reduce-overhead), the steps that run while an async checkpoint
# is written, the first step of a re-formed world with its graphs loaded from the run's compile cache
# against compiled, each step within a time limit of its own (below). Named only: the trainer's step
# autotuned (its limit 7 minutes), and trainer and reference at twice the micro-batch (3).
# Usage: bench/gpu_checks.sh OUT_DIR [STEP...]   (default: flight-recorder profile bench-gpu checkpoint compile-cache;
# compile-modes and batch-32 on request. PYTHON: the interpreter with torch and CUDA, python3 by default)
set -u
out=${1:?usage: bench/gpu_checks.sh OUT_DIR [STEP...]}
shift
steps=" ${*:-flight-recorder profile bench-gpu checkpoint compile-cache} "
py=${PYTHON:-python3}
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1

step() {  # step NAME SECONDS COMMAND...: the command's output in OUT_DIR/NAME.log, and its exit status
    local name=$1 limit=$2
    shift 2
    [[ $steps == *" $name "* ]] || return 0
    echo "=== $name (at most $limit s): $*"
    timeout --kill-after 10 "$limit" "$@" >"$out/$name.log" 2>&1
    echo "=== $name: exit $?"
    tail -n 40 "$out/$name.log"
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
"$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
step flight-recorder 120 "$py" -m pytest -p no:cacheprovider -n 0 tests/trainer/test_trainer_flight_recorder.py
step profile 200 "$py" bench/profile_step.py --json "$out/profile.json"
step bench-gpu 300 "$py" bench/bench_gpu.py --ablate --compile-modes reduce-overhead --skip-fp16 --skip-small-vocab \
    --json "$out/bench_gpu.json"
step checkpoint 150 "$py" bench/bench_gpu_checkpoint.py --json "$out/checkpoint.json"
step compile-cache 200 "$py" bench/bench_compile_cache.py --lm --repeats 1 --json "$out/compile_cache.json"
# both loops at twice the micro-batch: how MFU moves with it
step batch-32 180 "$py" bench/bench_gpu.py --batch 32 --skip-fp16 --skip-small-vocab --json "$out/batch_32.json"
# last, as its autotuning takes minutes: what another compile mode gives the trainer's step
step compile-modes 420 "$py" bench/bench_gpu.py --skip-fp16 --skip-small-vocab \
    --compile-modes max-autotune-no-cudagraphs --json "$out/compile_modes.json"
