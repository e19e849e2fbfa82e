#!/usr/bin/env bash
# What checkpoints cost the training loop, synchronous against
# checkpoint.async and against copies in memory (checkpoint.local_dir under
# /dev/shm, the file system's save at the last step only): the same one-rank
# job (a 4-layer Llama, hidden 512, MLP 1408, vocabulary 8192: 19M
# parameters, a 230 MB data file of weights and AdamW moments per save) runs
# 30 steps saving every 5 steps (the last step's save included), once with
# each. Prints, over steps 2-30, the mean
# step_time_s (the step's compute, which the background writer competes
# with for cores), checkpoint_stall_s (time the training thread spent on
# checkpoints, on the line of the step after it): in all, the mean after the
# saves of steps 5-25, the sum over the other steps (async: agreeing whether
# the writes ended, and commits), the mean time per step with both,
# and the whole run's wall time. Checkpoints go to a fresh directory under
# TMPDIR (default /tmp), written with fsync as every save is.
# usage: tools/bench/bench_async_checkpoint.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
out=$(mktemp -d)
shm=$(mktemp -d -p /dev/shm)
trap 'rm -rf "$out" "$shm"' EXIT
declare -A saves=(
  [sync]="--set checkpoint.interval=5"
  [async]="--set checkpoint.interval=5 --set checkpoint.async=true"
  [memory]="--set checkpoint.interval=30 --set checkpoint.local_dir=$shm --set checkpoint.local_interval=5")
for mode in sync async memory; do
  date +%s.%N > "$out/$mode.wall"
  "$build/tetra" train --config configs/tiny_dense.textproto --set model.num_hidden_layers=4 \
    --set model.hidden_size=512 --set model.num_attention_heads=8 --set model.num_key_value_heads=8 \
    --set model.intermediate_size=1408 --set model.vocab_size=8192 --set data.synthetic.order=1 \
    --set train.seq_length=128 \
    --set train.micro_batch_size=4 --set train.global_batch_size=4 --set train.steps=30 \
    --set log.interval=1000 --set checkpoint.keep=1 ${saves[$mode]} \
    --set checkpoint.dir="$out/ckpt_$mode" --set log.metrics_path="$out/$mode.jsonl" >/dev/null
  date +%s.%N >> "$out/$mode.wall"
done
/usr/bin/python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
for mode in ("sync", "async", "memory"):
    lines = [json.loads(l) for l in open(f"{out}/{mode}.jsonl")][1:]
    step = sum(l["step_time_s"] for l in lines) / len(lines)
    stall = sum(l.get("checkpoint_stall_s", 0) for l in lines)
    per_step = step + stall / len(lines)
    start, end = map(float, open(f"{out}/{mode}.wall").read().split())
    wall = end - start
    # A save's stall is on the next step's line; the last step's save (waited
    # for in both modes) is on none and counts in the wall time only.
    saves = [l.get("checkpoint_stall_s", 0) for l in lines if l["step"] % 5 == 1]
    others = sum(l.get("checkpoint_stall_s", 0) for l in lines if l["step"] % 5 != 1)
    print(f"{mode:6s}: step_time_s {step:.3f} s mean, checkpoint_stall_s {stall:.2f} s total: "
          f"{sum(saves) / len(saves):.3f} s mean after steps 5-25's saves, {others:.3f} s on "
          f"the other steps; step + stall {per_step:.3f} s mean, run {wall:.1f} s wall")
losses = [[json.loads(l)["loss"] for l in open(f"{out}/{mode}.jsonl")]
          for mode in ("sync", "async", "memory")]
same = losses[0] == losses[1] == losses[2]
print(f"losses {'bit-identical' if same else 'DIFFER'}")
PY
