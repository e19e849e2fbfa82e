#!/usr/bin/env bash
# The default job (configs/tiny_dense.textproto) must train to within 0.15 nats
# of the synthetic source's entropy floor (mean loss of the last 100 steps) in
# under three minutes.
# usage: check_default_recipe.sh TETRA_BINARY
set -euo pipefail
tetra=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
start=$(date +%s)
"$tetra" train --config "$root/configs/tiny_dense.textproto" --set log.metrics_path="$out/metrics.jsonl"
seconds=$(( $(date +%s) - start ))
/usr/bin/python3 - "$out/metrics.jsonl" "$seconds" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
seconds = int(sys.argv[2])
tail = lines[-100:]
mean = sum(l["loss"] for l in tail) / len(tail)
floor = lines[-1]["loss_floor"]
gap = mean - floor
print(f"default recipe: {len(lines)} steps in {seconds} s, mean loss of the last {len(tail)} steps "
      f"{mean:.4f}, floor {floor:.4f}, gap {gap:.4f} nats (limit 0.15)")
if gap > 0.15 or seconds >= 180:
    sys.exit("FAIL: the default recipe must reach within 0.15 nats of the floor in under 180 s")
PY
