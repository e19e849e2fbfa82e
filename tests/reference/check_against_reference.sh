#!/usr/bin/env bash
# Trains the same tiny model (Llama GQA, or with the flags MLA, YaRN, MoE and
# multi-token prediction; AdamW with decay 0.1, clip 1.0, warmup + cosine, 2
# micro-batches per step, no shuffle) in the independent PyTorch reference and
# in tetra from the same safetensors weights and llm.c shard, then requires
# tetra's losses at every step to match (compare_losses.py: 1e-4 relative
# unless flags after "--" say otherwise).
# usage: check_against_reference.sh TETRA_BINARY [reference flags...] [-- compare_losses flags...]
set -euo pipefail
tetra=$1
shift
reference_flags=()
compare_flags=(--rtol 1e-4)
while (($#)); do
  if [[ $1 == -- ]]; then
    shift
    compare_flags=("$@")
    break
  fi
  reference_flags+=("$1")
  shift
done
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
/usr/bin/python3 "$here/llama_reference.py" --out "$out" "${reference_flags[@]}"
"$tetra" train --config "$out/tetra.textproto" --set train.threads=1
/usr/bin/python3 "$here/compare_losses.py" "$out/reference.json" "$out/metrics.jsonl" "${compare_flags[@]}"
