#!/usr/bin/env bash
# The one script to run on a GPU machine (a driver and CUDA, no compilers,
# no network). Within 8 minutes, each part under its own timeout (they add
# up to 480 s), it runs:
#   1. every `gpu` test: the op table's CUDA cases against the CPU
#      reference (bf16 attention through cuDNN), cuDNN's attention at the
#      benchmarks' shapes and MLA's head dims, the staged backend's device
#      copies, a GPU training run against the CPU one (gpu_tests.log); then
#      the attention cases again on our own kernel (TETRA_CUDNN_ATTENTION=0;
#      own_attention.log);
#   2. the layout matrix on this one GPU through the staged backend (tp 2
#      with SP, pp 2 1F1B, interleaved, ZB-H1 and DualPipeV, dp 2 ZeRO-1,
#      cp 2 (ring attention), dp 2 x ep 2, cp 2 x ep 2, DualPipeV pp 2 x
#      ep 2 and tp 2 x pp 2 x dp 2 x ep 2 on
#      8 processes), each against the CPU fp32 single-rank run, and checkpoints moved GPU -> CPU and CPU -> GPU
#      (layouts.log; tools/gpu/check_gpu_layouts.py);
#   3. NCCL at world size 1 through `tetra commbench` (comm.log);
#   4. the benchmarks, dense (configs/bench_h200_1b.textproto; bench.log)
#      and MoE (configs/bench_h200_moe.textproto; bench_moe.log): tokens/s,
#      TFLOP/s and MFU over the steady steps; then both again with per-op
#      timing (TETRA_OP_PROFILE) to say where the time goes, op by op and by
#      kind: GEMM, attention, norms, elementwise, cross-entropy, MoE routing,
#      optimizer (bench_profile.log);
# and writes those logs and summary.txt (8 files) to $OUT; runs' scratch
# files go to a temporary directory.
#
#   tools/gpu/run_gpu_checks.sh [DIR]     (run from anywhere in the checkout)
#   DIR: a build directory (ctest -L gpu when ctest is there), or a bundle
#   from tools/gpu/make_gpu_bundle.sh (bundle.tar.gz, unpacked in place).
#   Environment: OUT (default ./gpu-checks), BENCH_STEPS (default 10),
#   BENCH_SETS (extra --set flags for both benchmarks, e.g. "train.micro_batch_size=2").
# Exit status: 0 when every part passed.
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
# NCCL and cuDNN are no part of the CUDA toolkit (and the bundle leaves them
# out): where the loader still misses a library, look in the nvidia-* Python
# wheels (PyTorch's nvidia-nccl-cu13, nvidia-cudnn-cu13, nvidia-cublas, ...).
# tetra loads NCCL and cuDNN itself when first used, and cuDNN compiles some
# attention engines at run time with NVRTC, so ldd lists none of them: look
# for them too.
loadable() {
  ldconfig -p 2>/dev/null | grep "$1 " > /dev/null && return 0
  local dir
  for dir in ${LD_LIBRARY_PATH//:/ }; do [[ -e $dir/$1 ]] && return 0; done
  return 1
}
runtime_loaded="libnccl.so.2 libcudnn.so.9 libnvrtc.so.13"
missing=$(ldd "$bin/tetra" 2>/dev/null | awk '$3 == "not" {print $1}' | sort -u)
for lib in $runtime_loaded; do loadable "$lib" || missing+=" $lib"; done
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
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# part NAME SECONDS LOG COMMAND...: runs COMMAND from the checkout with its
# output in $out/LOG, ended after SECONDS; a failure or timeout fails the script.
part() {
  local name=$1 seconds=$2 log=$3
  shift 3
  echo "== $name (at most $seconds s)" | tee -a "$out/summary.txt"
  local start=$SECONDS rc=0
  (cd "$root" && timeout -k 10 "$seconds" "$@") > "$out/$log" 2>&1 || rc=$?
  [[ $rc == 124 || $rc == 137 ]] && echo "TIMED OUT after $seconds s" | tee -a "$out/summary.txt"
  [[ $rc != 0 ]] && status=1
  echo "($name: exit $rc, $((SECONDS - start)) s)" >> "$out/summary.txt"
  return 0
}

echo "== device" | tee "$out/summary.txt"
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 |
    tee -a "$out/summary.txt"
else
  echo "no nvidia-smi" | tee -a "$out/summary.txt"
fi
ldd "$bin/tetra" 2>&1 | awk '$3 == "not" {print "missing library: " $1}' | tee -a "$out/summary.txt"
loadable libnccl.so.2 || echo "missing library: libnccl.so.2 (GPU communication)" | tee -a "$out/summary.txt"
loadable libcudnn.so.9 || echo "missing library: libcudnn.so.9 (fused attention)" | tee -a "$out/summary.txt"

# ctest where this build directory was configured (its test files hold
# absolute paths), else the one-binary form of the same tests.
if command -v ctest > /dev/null && [[ -f $dir/CTestTestfile.cmake ]] &&
   grep -q "$(cd "$dir" && pwd)" "$dir/CTestTestfile.cmake"; then
  part "gpu tests" 90 gpu_tests.log ctest --test-dir "$dir" -L gpu --no-tests=error --output-on-failure
  tail -n 30 "$out/gpu_tests.log" | tee -a "$out/summary.txt"
else
  part "gpu tests" 90 gpu_tests.log "$bin/tetra_gpu_tests"
  grep -E '^\[ *(FAILED|SKIPPED|PASSED) *\]' "$out/gpu_tests.log" | tee -a "$out/summary.txt"
fi
part "attention on our own kernel (TETRA_CUDNN_ATTENTION=0)" 20 own_attention.log \
  env TETRA_CUDNN_ATTENTION=0 "$bin/tetra_gpu_tests" --gtest_filter='Ops/OpTableGpuTest.*attention*'
grep -E '^\[ *(FAILED|PASSED) *\]' "$out/own_attention.log" | tee -a "$out/summary.txt"

part "layouts and checkpoints on one GPU against the CPU" 170 layouts.log bash -c \
  "python3 tools/gpu/check_gpu_layouts.py '$bin/tetra' '$scratch/layouts' layouts &&
   python3 tools/gpu/check_gpu_layouts.py '$bin/tetra' '$scratch/checkpoints' checkpoints"
grep -E '^(ok|FAIL)' "$out/layouts.log" | tee -a "$out/summary.txt"

part "NCCL at world size 1 (commbench)" 20 comm.log \
  "$bin/tetra" commbench --device cuda --op all --max-bytes 64M --iters 5 --warmup 2
tail -n 20 "$out/comm.log" | tee -a "$out/summary.txt"

# bench NAME CONFIG LOG: the benchmark's steps, then its steady state: the
# mean over the steps after the first two (allocation, cuBLASLt heuristics,
# cuDNN graphs).
bench() {
  local name=$1 config=$2 log=$3 metrics=$scratch/$1_metrics.jsonl
  local sets=(--set "train.steps=$steps" --set "optimizer.warmup_steps=1" --set "log.metrics_path=$metrics")
  for s in ${BENCH_SETS:-}; do sets+=(--set "$s"); done
  part "$name benchmark ($config, $steps steps)" 65 "$log" "$bin/tetra" train --config "$config" "${sets[@]}"
  tail -n 5 "$out/$log" | tee -a "$out/summary.txt"
  [[ -s $metrics ]] || return 0
  awk -F'[:,}]' -v name="$name" '{
      for (i = 1; i < NF; i++) {
        if ($i ~ /"tokens_per_s"/) tok = $(i + 1);
        if ($i ~ /"tflops"/) tf = $(i + 1);
        if ($i ~ /"mfu"/) mfu = $(i + 1);
        if ($i ~ /"step_time_s"/) st = $(i + 1);
      }
      if (NR > 2) { n++; stok += tok; stf += tf; smfu += mfu; sst += st }
    }
    END {
      if (n > 0) printf "%s steady state over %d steps: %.0f tokens/s, %.1f TFLOP/s, MFU %.1f%%, %.3f s/step\n",
                        name, n, stok / n, stf / n, 100 * smfu / n, sst / n
    }' "$metrics" | tee -a "$out/summary.txt"
}
bench dense configs/bench_h200_1b.textproto bench.log
bench MoE configs/bench_h200_moe.textproto bench_moe.log

profile_sets=(--set train.steps=3 --set optimizer.warmup_steps=1)
for s in ${BENCH_SETS:-}; do profile_sets+=(--set "$s"); done
part "where the time goes (TETRA_OP_PROFILE, 3 steps of each benchmark, ops serialised)" 50 \
  bench_profile.log bash -c "for config in configs/bench_h200_1b.textproto configs/bench_h200_moe.textproto; do
    echo \"== \$config\"
    TETRA_OP_PROFILE=1 '$bin/tetra' train --config \$config ${profile_sets[*]} || exit 1
  done"
awk '/^== configs/ {print; next} /^tetra op profile/ {on = 1; print; next} on && /^  / {print; next} {on = 0}' \
  "$out/bench_profile.log" | tee -a "$out/summary.txt"
echo "logs in $out (status $status)"
exit $status
