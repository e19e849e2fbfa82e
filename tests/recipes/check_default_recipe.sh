#!/usr/bin/env bash
# The default job (configs/tiny_dense.textproto) must run all its steps and
# train to within 0.15 nats of the synthetic source's entropy floor (mean
# loss of the last 100 steps). How long it takes is a benchmark
# (tools/bench/bench_default_recipe.sh), not a test: the cores may be shared.
# One thread: with a core taken by another job, two OpenMP threads wait on
# each other at every barrier and the run takes 25 times as long (300 steps:
# 76 s against 3 s for one thread). The thread count changes only the order
# of float sums, not what the recipe reaches.
# usage: check_default_recipe.sh TETRA_BINARY
set -euo pipefail
tetra=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$tetra" train --config "$root/configs/tiny_dense.textproto" --set log.metrics_path="$out/metrics.jsonl" \
  --set train.threads=1
/usr/bin/python3 - "$out/metrics.jsonl" "$root/configs/tiny_dense.textproto" <<'PY'
import json, re, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
steps = int(re.search(r"^\s*steps:\s*(\d+)", open(sys.argv[2]).read(), re.M).group(1))
tail = lines[-100:]
mean = sum(l["loss"] for l in tail) / len(tail)
floor = lines[-1]["loss_floor"]
gap = mean - floor
print(f"default recipe: {len(lines)} of {steps} steps, mean loss of the last {len(tail)} steps "
      f"{mean:.4f}, floor {floor:.4f}, gap {gap:.4f} nats (limit 0.15)")
if len(lines) != steps or gap > 0.15:
    sys.exit(f"FAIL: the default recipe must run its {steps} steps and reach within 0.15 nats of the floor")
PY
