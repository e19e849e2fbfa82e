#!/usr/bin/env bash
# CPU training throughput of configs/bench_cpu_35m.textproto: tetra and
# PyTorch eager (Debian's python3-torch, same model, same thread count) side by
# side, against the machine's measured OpenBLAS SGEMM peak.
# usage: tools/bench/bench_cpu.sh [BUILD_DIR] [THREADS]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
threads=${2:-2}
steps=8
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# The peak: the best of 3 repetitions at 1024^3 and 2048^3 (a busy core lowers a single sample).
peak=$("$build/gemm_benchmark" --benchmark_filter="BM_Sgemm/(1024|2048)/$threads/" \
  --benchmark_repetitions=3 --benchmark_format=json \
  | /usr/bin/python3 -c 'import json,sys; print(max(b["GFLOP/s"] for b in json.load(sys.stdin)["benchmarks"] if b.get("run_type") == "iteration"))')

"$build/tetra" train --config configs/bench_cpu_35m.textproto --set train.steps=$steps \
  --set train.threads=$threads --set log.metrics_path="$out/tetra.jsonl" --set log.interval=1000 >/dev/null

/usr/bin/python3 tools/bench/torch_eager_llama.py --threads "$threads" --steps 4 --warmup-steps 1 -- \
  --vocab 8192 --hidden 512 --layers 8 --heads 8 --kv-heads 8 --intermediate 1536 \
  --seq 256 --global-batch 8 --micro-batch 8 >"$out/torch.json"

/usr/bin/python3 - "$out/tetra.jsonl" "$out/torch.json" "$peak" "$threads" <<'PY'
import json, statistics, sys
tetra_lines = [json.loads(l) for l in open(sys.argv[1])]
steady = tetra_lines[2:]  # the first steps pay for page faults and warm-up
tetra_tps = statistics.median(l["tokens_per_s"] for l in steady)
tetra_gflops = statistics.median(l["tflops"] for l in steady) * 1e3
torch_tps = json.load(open(sys.argv[2]))["tokens_per_s"]
peak, threads = float(sys.argv[3]), sys.argv[4]
flops_per_token = tetra_gflops * 1e9 / tetra_tps
print(f"bench_cpu_35m, {threads} threads, SGEMM peak {peak:.1f} GFLOP/s (OpenBLAS, best of 1024^3 and 2048^3)")
print(f"{'':16}{'tokens/s':>10}{'GFLOP/s':>10}{'of peak':>9}")
for name, tps in (("tetra", tetra_tps), ("pytorch eager", torch_tps)):
    gf = tps * flops_per_token / 1e9
    print(f"{name:16}{tps:10.1f}{gf:10.1f}{gf / peak:9.1%}")
print(f"tetra / pytorch eager: {tetra_tps / torch_tps:.2f}x")
PY
