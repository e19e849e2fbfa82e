#!/usr/bin/env bash
# The one script to run on a GPU machine (a driver and CUDA, no compilers,
# no network): runs every `gpu` test (CUDA kernels against the CPU kernels, a
# GPU training run against the CPU one) and the GPU benchmark (`tetra train`
# on configs/bench_h200_1b.textproto for a few steps: tokens/s, TFLOP/s, MFU),
# then the same benchmark with per-op timing (TETRA_OP_PROFILE) to say where
# the time goes, and writes every log to $OUT.
#
#   tools/gpu/run_gpu_checks.sh [DIR]     (run from anywhere in the checkout)
#   DIR: a build directory (ctest -L gpu when ctest is there), or a bundle
#   from tools/gpu/make_gpu_bundle.sh (bundle.tar.gz, unpacked in place).
#   Environment: OUT (default ./gpu-checks), BENCH_STEPS (default 10),
#   BENCH_SETS (extra --set flags for the benchmark, e.g. "train.micro_batch_size=2").
# Exit status: 0 when every test passed and the benchmark ran.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=${1:-$root/build}
out=${OUT:-$PWD/gpu-checks}
steps=${BENCH_STEPS:-10}
mkdir -p "$out" && out=$(cd "$out" && pwd)  # absolute: the benchmark runs from $root
if [[ -f $dir/bundle.tar.gz ]]; then
  tar -xzf "$dir/bundle.tar.gz" -C "$dir"
  source "$dir/bin/env.sh"  # its libraries, mpirun and Open MPI's plugins
  bin=$dir/bin
else
  bin=$dir
fi
for cuda_lib in /usr/local/cuda/lib64 /usr/local/cuda/lib; do
  [[ -d $cuda_lib ]] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:$cuda_lib"
done
# NCCL is no part of the CUDA toolkit (and the bundle leaves it out): where
# the loader still misses a library, look in the nvidia-* Python wheels
# (PyTorch's nvidia-nccl-cu13, nvidia-cublas, ...). tetra loads NCCL itself
# when a GPU communicator is made, so ldd does not list it: look for it too.
nccl_loadable() {
  ldconfig -p 2>/dev/null | grep 'libnccl\.so\.2 ' > /dev/null && return 0
  local dir
  for dir in ${LD_LIBRARY_PATH//:/ }; do [[ -e $dir/libnccl.so.2 ]] && return 0; done
  return 1
}
missing=$(ldd "$bin/tetra" 2>/dev/null | awk '$3 == "not" {print $1}' | sort -u)
nccl_loadable || missing+=" libnccl.so.2"
if [[ -n $missing ]] && command -v python3 > /dev/null; then
  wheel_dirs=$(python3 -c 'import glob, sys
for p in sys.path: print("\n".join(glob.glob(p + "/nvidia/*/lib")))' 2>/dev/null)
  for lib in $missing; do
    for wheel_dir in $wheel_dirs; do
      if [[ -e $wheel_dir/$lib ]]; then
        export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:$wheel_dir"
        break
      fi
    done
  done
fi
status=0

echo "== device" | tee "$out/summary.txt"
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 |
    tee -a "$out/summary.txt"
  nvidia-smi > "$out/nvidia-smi.txt" 2>&1
else
  echo "no nvidia-smi" | tee -a "$out/summary.txt"
fi
ldd "$bin/tetra" 2>&1 | awk '$3 == "not" {print "missing library: " $1}' | tee -a "$out/summary.txt"
nccl_loadable || echo "missing library: libnccl.so.2 (GPU communication)" | tee -a "$out/summary.txt"

echo "== gpu tests" | tee -a "$out/summary.txt"
# ctest where this build directory was configured (its test files hold
# absolute paths), else the one-binary form of the same tests.
if command -v ctest > /dev/null && [[ -f $dir/CTestTestfile.cmake ]] &&
   grep -q "$(cd "$dir" && pwd)" "$dir/CTestTestfile.cmake"; then
  ctest --test-dir "$dir" -L gpu --no-tests=error --output-on-failure --timeout 600 > "$out/gpu_tests.log" 2>&1 ||
    status=1
  tail -n 30 "$out/gpu_tests.log" | tee -a "$out/summary.txt"
else
  timeout 900 "$bin/tetra_gpu_tests" --gtest_output="xml:$out/gpu_tests.xml" \
    > "$out/gpu_tests.log" 2>&1 || status=1
  grep -E '^\[ *(OK|FAILED|SKIPPED|PASSED) *\]' "$out/gpu_tests.log" | tee -a "$out/summary.txt"
fi

echo "== benchmark (configs/bench_h200_1b.textproto, $steps steps)" | tee -a "$out/summary.txt"
sets=(--set "train.steps=$steps" --set "optimizer.warmup_steps=1"
      --set "log.metrics_path=$out/bench_metrics.jsonl")
for s in ${BENCH_SETS:-}; do sets+=(--set "$s"); done
(cd "$root" && timeout 1200 "$bin/tetra" train --config configs/bench_h200_1b.textproto \
  "${sets[@]}") > "$out/bench.log" 2>&1 || status=1
tail -n 5 "$out/bench.log" | tee -a "$out/summary.txt"
if [[ -s $out/bench_metrics.jsonl ]]; then
  # Mean over the steps after the first two (allocation, cuBLASLt heuristics).
  awk -F'[:,}]' '{
      for (i = 1; i < NF; i++) {
        if ($i ~ /"tokens_per_s"/) tok = $(i + 1);
        if ($i ~ /"tflops"/) tf = $(i + 1);
        if ($i ~ /"mfu"/) mfu = $(i + 1);
        if ($i ~ /"step_time_s"/) st = $(i + 1);
      }
      if (NR > 2) { n++; stok += tok; stf += tf; smfu += mfu; sst += st }
    }
    END {
      if (n > 0) printf "steady state over %d steps: %.0f tokens/s, %.1f TFLOP/s, MFU %.1f%%, %.3f s/step\n",
                        n, stok / n, stf / n, 100 * smfu / n, sst / n
    }' "$out/bench_metrics.jsonl" | tee -a "$out/summary.txt"
fi
echo "== where the time goes (TETRA_OP_PROFILE, 4 steps, ops serialised)" | tee -a "$out/summary.txt"
(cd "$root" && TETRA_OP_PROFILE=1 timeout 900 "$bin/tetra" train \
  --config configs/bench_h200_1b.textproto --set train.steps=4 --set optimizer.warmup_steps=1 \
  --set log.metrics_path= ${BENCH_SETS:+$(printf -- '--set %s ' $BENCH_SETS)}) \
  > "$out/bench_profile.log" 2>&1 || status=1
sed -n '/tetra op profile/,$p' "$out/bench_profile.log" | tee -a "$out/summary.txt"
echo "logs in $out (status $status)"
exit $status
