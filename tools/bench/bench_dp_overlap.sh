#!/usr/bin/env bash
# How much of the data-parallel gradient reduction hides behind backward, on
# 2 ranks: the step's exposed DP communication (comm_exposed_s_dp, the wait
# after backward) with small buckets launched during backward, against one
# bucket launched only after backward (nothing can hide).
# usage: tools/bench/bench_dp_overlap.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
model=(--set model.vocab_size=4096 --set model.hidden_size=256 --set model.num_hidden_layers=4
       --set model.num_attention_heads=4 --set model.intermediate_size=768
       --set train.seq_length=128 --set train.global_batch_size=8 --set train.micro_batch_size=4
       --set train.steps=8 --set train.threads=1 --set data.synthetic.order=1 --set log.interval=1000)
for mode in overlapped:2 after_backward:100000; do
  name=${mode%%:*}
  mpirun --oversubscribe -np 2 "$build/tetra" train --config /dev/null "${model[@]}" \
    --set parallel.dp_bucket_mb="${mode##*:}" --set log.metrics_path="$out/$name.jsonl" >/dev/null
done
/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
def load(name):
    lines = [json.loads(l) for l in open(f"{sys.argv[1]}/{name}.jsonl")][2:]  # skip warm-up
    return (statistics.median(l["comm_exposed_s_dp"] for l in lines),
            statistics.median(l["step_time_s"] for l in lines), lines[0]["grad_bytes"])
over, over_step, grad_bytes = load("overlapped")
after, after_step, _ = load("after_backward")
print(f"data-parallel gradient reduction on 2 ranks, {grad_bytes / 2**20:.1f} MiB of gradients per rank")
print(f"{'buckets':24}{'exposed comm s/step':>22}{'step s':>10}")
print(f"{'2 MiB, during backward':24}{over:22.4f}{over_step:10.3f}")
print(f"{'one, after backward':24}{after:22.4f}{after_step:10.3f}")
print(f"hidden behind backward: {max(0.0, 1 - over / after):.0%} of the exposed reduction time")
PY
