#!/usr/bin/env bash
# Activation recompute's memory and time on a run where activations dominate:
# an 8-layer Llama (hidden 256, 8 heads, MLP 704) on micro-batches of 8
# sequences of 1024 tokens, one rank, 4 steps with train.recompute NONE,
# SELECTIVE and FULL. Prints each mode's peak resident memory (the run's
# peak_memory_bytes) and mean step time over steps 2-4, and each recompute's
# share of NONE's memory and extra time. The losses must agree bit for bit (tests/layouts/check_recompute.py
# checks that under every layout; here it is only reported).
# usage: tools/bench/bench_recompute.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for mode in NONE SELECTIVE FULL; do
  "$build/tetra" train --config configs/tiny_dense.textproto --set model.num_hidden_layers=8 \
    --set model.hidden_size=256 --set model.num_attention_heads=8 --set model.intermediate_size=704 \
    --set train.seq_length=1024 --set train.micro_batch_size=8 --set train.global_batch_size=8 \
    --set train.steps=4 --set log.interval=1 --set train.recompute=$mode \
    --set log.metrics_path="$out/$mode.jsonl" >/dev/null
done
/usr/bin/python3 - "$out" <<'PY'
import json, sys
runs = {m: [json.loads(l) for l in open(f"{sys.argv[1]}/{m}.jsonl")] for m in ("NONE", "SELECTIVE", "FULL")}
stats = {}
for mode, lines in runs.items():
    peak = max(l["peak_memory_bytes"] for l in lines)
    step = sum(l["step_time_s"] for l in lines[1:]) / len(lines[1:])
    stats[mode] = (peak, step)
    print(f"recompute {mode:9s}: peak memory {peak / 2**20:8.1f} MiB, step {step:.3f} s")
for mode in ("SELECTIVE", "FULL"):
    same = all(a["loss"] == b["loss"] and a["grad_norm"] == b["grad_norm"] for a, b in zip(runs["NONE"], runs[mode]))
    print(f"{mode}: {100 * stats[mode][0] / stats['NONE'][0]:.1f}% of NONE's memory, "
          f"{100 * (stats[mode][1] / stats['NONE'][1] - 1):+.0f}% step time; losses and gradient norms "
          f"{'bit-identical' if same else 'DIFFER'}")
PY
