#!/usr/bin/env bash
# The default job's wall time (README: about 30 seconds on 2 cores) and how
# close it gets to the synthetic source's entropy floor (mean loss of the last
# 100 steps; tests/recipes/check_default_recipe.sh checks the 0.15-nat bound).
# usage: tools/bench/bench_default_recipe.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
start=$(date +%s.%N)
"$build/tetra" train --config configs/tiny_dense.textproto --set log.metrics_path="$out/metrics.jsonl" >/dev/null
end=$(date +%s.%N)
/usr/bin/python3 - "$out/metrics.jsonl" "$start" "$end" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
tail = lines[-100:]
gap = sum(l["loss"] for l in tail) / len(tail) - lines[-1]["loss_floor"]
print(f"configs/tiny_dense.textproto: {len(lines)} steps in {float(sys.argv[3]) - float(sys.argv[2]):.1f} s, "
      f"{gap:.4f} nats above the floor")
PY
