#!/usr/bin/env bash
# hf_elmo on one CUDA GPU: words/s of the original and small sizes in fp32 and bf16 autocast, with bf16's
# deviation from fp32 and the approximate cuDNN mode; then the checks that need a GPU: the exactness tests on
# CUDA (needs pytest and the fixtures in ../shared/fixtures), `hf-elmo embed --device cuda` against the CPU, and
# the training speed of the ptb-gpu preset (needs datasets and data/ptb from `make ptb-data`). For a machine
# with torch (CUDA) and no network:
#   bash benchmarks/gpu.sh [--batch-sizes 32,256] [--runs 5] [--no-checks]
# transformers, tokenizers, safetensors and huggingface_hub must be importable; if they are not installed,
# `make gpu-deps` (on a machine with network) puts them in build/gpu-deps, which this script adds to the path.
# Writes benchmarks/GPU_RESULTS.md (or $OUT/GPU_RESULTS.md when OUT is set); benchmarks/gpu_train_bench.py appends
# its training section (the fused training path's checks and speed). Takes under 10 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ -d build/gpu-deps ]; then
  export PYTHONPATH="$PWD/build/gpu-deps${PYTHONPATH:+:$PYTHONPATH}"
fi
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
OUTPUT="${OUT:-benchmarks}/GPU_RESULTS.md"
status=0
timeout 290 "$PYTHON" benchmarks/gpu_bench.py --output "$OUTPUT" "$@" || status=$?
# Training: the fused path's gradients on CUDA, the ptb-gpu and original sizes' words/s, bf16's loss drift.
timeout 300 "$PYTHON" benchmarks/gpu_train_bench.py --output "$OUTPUT" || status=$?
exit "$status"
