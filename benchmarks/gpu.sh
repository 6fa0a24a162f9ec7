#!/usr/bin/env bash
# hf_elmo on one CUDA GPU (benchmarks/gpu_bench.py): words/s of the original and small sizes, exact fp32 (CUDA
# graphs, TF32 off), the bf16 mode and the approximate cuDNN mode, with each mode's deviation and the exact GPU
# outputs against the CPU's; `hf-elmo embed --device cuda` end to end against the model alone; the exactness
# tests on CUDA (needs pytest and the fixtures in ../shared/fixtures); then training (gpu_train_bench.py: the
# fused path on CUDA, ptb-gpu and the original size in bf16 and fp32; needs datasets and data/ptb from
# `make ptb-data`). For a machine with torch (CUDA) and no network:
#   bash benchmarks/gpu.sh [--batch-sizes 32,256] [--runs 5] [--no-checks]
# transformers, tokenizers, safetensors, huggingface_hub, h5py, accelerate and pytest (and datasets, for the
# training part) must be importable: `make gpu-deps`, run on a machine with network and the same Python version,
# installs them into build/gpu-deps, which this script adds to the path. Where ../shared/fixtures is missing (or a
# link to nothing) and build/shared-fixtures holds a copy of it (carried to a machine that has the repository
# alone), it is linked there.
# Writes benchmarks/GPU_RESULTS.md (or $OUT/GPU_RESULTS.md when OUT is set), rewritten after each part, so a
# timeout leaves the parts measured so far, marked as cut short; benchmarks/gpu_train_bench.py then writes its
# training section into it, replacing an earlier one. Each half has a time limit, GPU_BENCH_SECONDS and
# GPU_TRAIN_SECONDS (default 270 each: the whole script ends within 10 minutes). Where the time goes:
# `python3 benchmarks/gpu_profile.py DIR [PART ...]` (torch.profiler; see its docstring).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ -d build/gpu-deps ]; then
  export PYTHONPATH="$PWD/build/gpu-deps${PYTHONPATH:+:$PYTHONPATH}"
fi
if [ ! -d ../shared/fixtures ] && [ -d build/shared-fixtures ]; then
  mkdir -p ../shared && ln -sfn "$PWD/build/shared-fixtures" ../shared/fixtures
fi
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
OUTPUT="${OUT:-benchmarks}/GPU_RESULTS.md"
status=0
# (each script is told its limit, GPU_SCRIPT_SECONDS, and ends a part's command before it)
GPU_SCRIPT_SECONDS="${GPU_BENCH_SECONDS:-270}" timeout -k 15 "${GPU_BENCH_SECONDS:-270}" \
  "$PYTHON" benchmarks/gpu_bench.py --output "$OUTPUT" "$@" || status=$?
# Training: the fused path's gradients on CUDA, the ptb-gpu and original sizes' words/s, bf16's loss drift.
GPU_SCRIPT_SECONDS="${GPU_TRAIN_SECONDS:-270}" timeout -k 15 "${GPU_TRAIN_SECONDS:-270}" \
  "$PYTHON" benchmarks/gpu_train_bench.py --output "$OUTPUT" || status=$?
exit "$status"
