#!/usr/bin/env bash
# The default job (configs/tiny_dense.textproto), or another synthetic-data
# recipe, must run all its steps and train to within LIMIT nats (0.15 by
# default) of the synthetic source's entropy floor (mean loss of the last 100
# steps). How long it takes is a benchmark
# (tools/bench/bench_default_recipe.sh), not a test: the cores may be shared.
# One thread: with a core taken by another job, two OpenMP threads wait on
# each other at every barrier and the run takes 25 times as long (300 steps:
# 76 s against 3 s for one thread). The thread count changes only the order
# of float sums, not what the recipe reaches.
# usage: check_default_recipe.sh TETRA_BINARY [RECIPE LIMIT]
set -euo pipefail
tetra=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
recipe=${2:-$root/configs/tiny_dense.textproto}
limit=${3:-0.15}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$tetra" train --config "$recipe" --set log.metrics_path="$out/metrics.jsonl" --set train.threads=1
/usr/bin/python3 - "$out/metrics.jsonl" "$recipe" "$limit" <<'PY'
import json, os, re, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
steps = int(re.search(r"^\s*steps:\s*(\d+)", open(sys.argv[2]).read(), re.M).group(1))
limit = float(sys.argv[3])
name = os.path.basename(sys.argv[2])
tail = lines[-100:]
mean = sum(l["loss"] for l in tail) / len(tail)
floor = lines[-1]["loss_floor"]
gap = mean - floor
print(f"{name}: {len(lines)} of {steps} steps, mean loss of the last {len(tail)} steps "
      f"{mean:.4f}, floor {floor:.4f}, gap {gap:.4f} nats (limit {limit:g})")
if len(lines) != steps or gap > limit:
    sys.exit(f"FAIL: {name} must run its {steps} steps and reach within {limit:g} nats of the floor")
PY
