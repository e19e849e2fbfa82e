#!/usr/bin/env bash
# Trains the same tiny Llama (GQA, or MLA with --kv-lora-rank; untied head, AdamW with decay 0.1, clip 1.0,
# warmup + cosine, 2 micro-batches per step, no shuffle) in the independent
# PyTorch reference and in tetra from the same safetensors weights and llm.c
# shard, then requires tetra's loss at every step to match within 1e-4 relative.
# usage: check_against_reference.sh TETRA_BINARY [extra reference flags...]
set -euo pipefail
tetra=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
/usr/bin/python3 "$here/llama_reference.py" --out "$out" "$@"
"$tetra" train --config "$out/tetra.textproto" --set train.threads=1
/usr/bin/python3 "$here/compare_losses.py" "$out/reference.json" "$out/metrics.jsonl" --rtol 1e-4
