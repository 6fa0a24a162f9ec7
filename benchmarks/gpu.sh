#!/usr/bin/env bash
# hf_elmo on one CUDA GPU (benchmarks/gpu_bench.py): words/s of the original and small sizes, exact fp32 (CUDA
# graphs, TF32 off), the bf16 mode and the approximate cuDNN mode, with each mode's deviation and the exact GPU
# outputs against the CPU's; `hf-elmo embed --device cuda` end to end against the model alone; the exactness
# tests on CUDA (needs pytest and the fixtures in ../shared/fixtures); then training (gpu_train_bench.py: the
# fused path on CUDA, ptb-gpu and the original size in bf16 and fp32; needs datasets and data/ptb from
# `make ptb-data`). For a machine
# with torch (CUDA) and no network:
#   bash benchmarks/gpu.sh [--batch-sizes 32,256] [--runs 5] [--no-checks]
# transformers, tokenizers, safetensors and huggingface_hub must be importable; if they are not installed,
# `make gpu-deps` (on a machine with network) puts them in build/gpu-deps, which this script adds to the path.
# Writes benchmarks/GPU_RESULTS.md (or $OUT/GPU_RESULTS.md when OUT is set); benchmarks/gpu_train_bench.py then
# writes its training section into it (the fused training path's checks and speed), replacing an earlier one: the
# file is rewritten after each part, so a timeout leaves the parts measured so far, marked as cut short. Takes under
# 10 minutes. Where the time goes: `python3 benchmarks/gpu_profile.py DIR [PART ...]` (torch.profiler; see its
# docstring).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ -d build/gpu-deps ]; then
  export PYTHONPATH="$PWD/build/gpu-deps${PYTHONPATH:+:$PYTHONPATH}"
fi
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
OUTPUT="${OUT:-benchmarks}/GPU_RESULTS.md"
status=0
timeout -k 20 290 "$PYTHON" benchmarks/gpu_bench.py --output "$OUTPUT" "$@" || status=$?
# Training: the fused path's gradients on CUDA, the ptb-gpu and original sizes' words/s, bf16's loss drift.
timeout -k 20 300 "$PYTHON" benchmarks/gpu_train_bench.py --output "$OUTPUT" || status=$?
exit "$status"
