#!/usr/bin/env bash
# The one script to run on a GPU machine (a driver and CUDA, no compilers,
# no network, no MPI: the bundle brings Open MPI). Every part runs, whatever
# failed before it, each under its own timeout; the parts add up to at most
# 460 s, about 8 minutes with the preflight:
#   preflight (guarded commands, a few seconds; preflight.txt): GPU name,
#      driver, compute and MIG mode, memory (nvidia-smi), the driver's CUDA
#      version, glibc here against the highest GLIBC_ version the packed
#      binaries need, /dev/shm, CPUs and memory, where each CUDA 13 library
#      was found (tools/gpu/find_cuda_libs.sh: LD_LIBRARY_PATH, the loader
#      cache, the CUDA toolkit, the nvidia-* wheels of every Python here;
#      every directory it finds one in is added to LD_LIBRARY_PATH for all
#      later parts) and ldd of each binary;
#   dense benchmark (65 s; configs/bench_h200_1b.textproto; bench.log) and
#      MoE benchmark (65 s; configs/bench_h200_moe.textproto; bench_moe.log):
#      tokens/s, TFLOP/s, MFU and s/step over the steady steps (all but the
#      first two: allocation, cuBLASLt heuristics, cuDNN graphs), the engine
#      that ran each attention shape, and the steps' cudaMalloc/cudaFree
#      calls (device_mallocs: 0 expected);
#   gpu tests (90 s; gpu_tests.log): every test of tetra_gpu_tests (the op
#      table's CUDA cases against the CPU reference, cuDNN's attention at the
#      benchmarks' shapes and MLA's head dims, the staged backend's device
#      copies, GPU training against the CPU run), through
#      tools/gpu/run_gtests.sh: a test that crashes or runs past 30 s is
#      recorded and the tests after it go on in a new process;
#   own attention (20 s; gpu_tests.log): the op table's attention cases again
#      on tetra's own kernel (TETRA_CUDNN_ATTENTION=0);
#   layouts (120 s; layouts.log; tools/gpu/check_gpu_layouts.py): the layout
#      matrix on this one GPU through the staged backend (tp 2 with SP, pp 2
#      1F1B, interleaved, ZB-H1 and DualPipeV, dp 2 ZeRO-1, cp 2 (ring
#      attention), and for MoE dp 2 x ep 2, cp 2 x ep 2, DualPipeV pp 2 x ep 2
#      and tp 2 x pp 2 x dp 2 x ep 2 on 8 processes), each against the CPU
#      fp32 single-rank run; a layout that fails or crashes is a FAIL line
#      and the next one runs;
#   checkpoints (30 s; layouts.log): checkpoints moved GPU -> CPU and
#      CPU -> GPU, the weights bit for bit;
#   commbench (20 s; comm.log): NCCL at world size 1 through `mpirun -np 1
#      tetra commbench`;
#   dense profile and MoE profile (25 s each; bench_profile.log): 3 steps of
#      each benchmark with per-op timing (TETRA_OP_PROFILE, ops serialised):
#      where the time goes, op by op and by kind: GEMM, attention, norms,
#      elementwise, cross-entropy, MoE routing, optimizer.
# $OUT gets those 7 files and summary.txt, 8 in all (logs over 16 MiB are cut
# in the middle): summary.txt has the preflight's key lines, a line per part
# as it ends, "STATUS name (N s)[: first error line]" with STATUS PASS, FAIL,
# SKIP (none failed but some did not run: no GPU, GTEST_SKIP) or TIMEOUT,
# the parts' key results (steady-state figures, failed tests, layout lines,
# the op profiles), and the same part lines again in a table at the end.
# Runs' scratch files go to a temporary directory.
#
#   tools/gpu/run_gpu_checks.sh [--preflight-only] [DIR]   (from anywhere in the checkout)
#   tools/gpu/run_gpu_checks.sh --emulated [BUILD]   (the emulated GPU: BUILD/tetra_emu)
#   DIR: a bundle from tools/gpu/make_gpu_bundle.sh (bundle.tar.gz, unpacked
#   in place; its bin/env.sh sets PATH, LD_LIBRARY_PATH and OPAL_PREFIX), or
#   a build directory (default build/; mpirun from PATH).
#   --preflight-only: the preflight alone (preflight.txt and summary.txt).
#   --emulated: every part on the emulated GPU (emulator/; build/tetra_emu and
#   build/tetra_gpu_tests_emu), on this machine: the preflight says what the
#   emulator is, the benchmarks shrink to a tiny model (3 steps), the layouts
#   run through the staged backend and through NCCL, and each part has more
#   time (the emulator runs every CUDA thread as a fiber on the CPU).
#   Environment: OUT (default ./gpu-checks), BENCH_STEPS (default 10),
#   BENCH_SETS (extra --set flags for the benchmarks and profiles, e.g.
#   "train.micro_batch_size=2"), GTEST_EACH=1 (a process for every gpu test).
# Exit status: 0 when no part failed or timed out and there is a GPU.
set -uo pipefail
ulimit -c 0  # a crashing test or rank leaves no core file to fill the disk
preflight_only=0 emulated=0
if [[ ${1:-} == --preflight-only ]]; then preflight_only=1; shift; fi
if [[ ${1:-} == --emulated ]]; then emulated=1; shift; fi
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(cd "${1:-$root/build}" && pwd) || exit 2
out=${OUT:-$PWD/gpu-checks}
steps=${BENCH_STEPS:-$( ((emulated)) && echo 3 || echo 10)}
mkdir -p "$out" && out=$(cd "$out" && pwd)  # absolute: the parts run from $root
logs=(summary.txt preflight.txt bench.log bench_moe.log gpu_tests.log layouts.log comm.log bench_profile.log)
for f in "${logs[@]}"; do rm -f "${out:?}/$f"; done
summary=$out/summary.txt
# mpirun as root (the GPU machine's user), for commbench and the layouts.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
bundle=0
if [[ -f $dir/bundle.tar.gz ]]; then
  tar -xzf "$dir/bundle.tar.gz" -C "$dir"
  source "$dir/bin/env.sh"  # its libraries, mpirun and Open MPI's plugins
  bin=$dir/bin
  bundle=1
else
  bin=$dir
fi
tetra=$bin/tetra gpu_tests=$bin/tetra_gpu_tests
if (( emulated )); then
  tetra=$bin/tetra_emu gpu_tests=$bin/tetra_gpu_tests_emu
  # A tiny model instead of the benchmarks' billion parameters.
  emulated_sets="model.vocab_size=256 model.hidden_size=64 model.num_hidden_layers=2 model.num_attention_heads=4
    model.num_key_value_heads=2 model.intermediate_size=128 train.seq_length=64 train.micro_batch_size=2
    train.global_batch_size=4"
  emulated_moe_sets="model.moe.moe_intermediate_size=32"
fi
# limit SECONDS: a part's time, four times more on the emulated GPU.
limit() { echo $(( emulated ? 4 * $1 : $1 )); }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

say() { echo "$*" | tee -a "$summary"; }
results=()
failed=0
# record STATUS NAME SECONDS [DETAIL]: one part's line, now and in the final table.
record() {
  local line
  line=$(printf '%-7s %s (%s s)%s' "$1" "$2" "$3" "${4:+: $4}")
  results+=("$line")
  [[ $1 == FAIL || $1 == TIMEOUT ]] && failed=1
  say "$line"
}
# first_error FILE FROM_LINE: the part's first error line: a runner's
# "first failure:" line, else the first line matching error|FAIL|fatal|Check
# failed|terminate|Abort, else its last line.
first_error() {
  local text line
  text=$(tail -n +"$2" "$1" | grep -av '^[[:space:]]*$')
  line=$(grep -a -m1 '^first failure: ' <<< "$text")
  [[ -n $line ]] || line=$(grep -a -m1 -E 'error|Error|ERROR|FAIL|fatal|Fatal|Check failed|terminate|Abort' <<< "$text")
  [[ -n $line ]] || line=$(tail -n 1 <<< "$text")
  line=${line#first failure: }
  echo "${line:0:400}"
}
# part NAME SECONDS LOG COMMAND...: runs COMMAND from the checkout, its output
# appended to $out/LOG under a header, ended after SECONDS (exit 77: SKIP).
part() {
  local name=$1 seconds=$2 log=$3
  shift 3
  echo "== $name (at most $seconds s)"
  echo "== $name (at most $seconds s): $*" >> "$out/$log"
  local from start=$SECONDS rc=0 status detail=""
  from=$(($(wc -l < "$out/$log") + 1))
  (cd "$root" && timeout -k 5 "$seconds" "$@") >> "$out/$log" 2>&1 || rc=$?
  case $rc in
    0) status=PASS ;;
    77) status=SKIP detail=$(grep -a -m1 '^skipped: ' <(tail -n +"$from" "$out/$log") | sed 's/^skipped: //') ;;
    124|137) status=TIMEOUT detail="ran past $seconds s; last: $(tail -n +"$from" "$out/$log" | grep -av '^[[:space:]]*$' | tail -n 1 | cut -c1-300)" ;;
    *) status=FAIL detail="exit $rc: $(first_error "$out/$log" "$from")" ;;
  esac
  echo "($name: $status, exit $rc)" >> "$out/$log"
  record "$status" "$name" $((SECONDS - start)) "$detail"
}

# ---- preflight ----------------------------------------------------------
preflight() {
  local problems=() gpu=0 f
  echo "tetra GPU checks preflight, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), host $(hostname 2>/dev/null || cat /etc/hostname)"
  echo "checks from $root; binaries from $bin$( ((bundle)) && echo " (bundle)")"
  [[ -f $bin/bundle_info.txt ]] && sed 's/^/bundle: /' "$bin/bundle_info.txt"
  echo "== GPU"
  if command -v nvidia-smi > /dev/null; then
    local q smi_rc=0
    q=$(timeout 10 nvidia-smi --query-gpu=name,driver_version,compute_mode,mig.mode.current,memory.total --format=csv 2>&1) ||
      smi_rc=$?
    echo "$q"
    if (( smi_rc == 124 )); then
      echo "nvidia-smi hung for 10 s (a wedged driver?)"
    elif ! grep -q MiB <<< "$q"; then  # a driver that does not know a field: the basic ones, and the list
      q=$(timeout 10 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1)
      echo "$q"
      timeout 10 nvidia-smi -L 2>&1
    fi
    if grep -q MiB <<< "$q"; then gpu=1; fi
    grep -q Exclusive <<< "$q" &&
      problems+=("compute mode is exclusive: the layouts' 2 to 8 ranks that share the GPU will fail")
    grep -qi ', Enabled,' <<< "$q" &&
      echo "note: MIG is enabled: CUDA sees MIG instances only (CUDA_VISIBLE_DEVICES=MIG-...), each with part of the GPU"
    local cuda=""
    (( smi_rc == 124 )) || cuda=$(timeout 10 nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' | awk '{print $3}')
    if [[ -n $cuda ]]; then
      if [[ $(printf '%s\n' 13.0 "$cuda" | sort -V | head -n 1) == 13.0 ]]; then
        echo "driver's CUDA version $cuda: OK for CUDA 13"
      else
        echo "driver's CUDA version $cuda: TOO OLD for CUDA 13 (driver 580 or later)"
        problems+=("the driver supports CUDA $cuda only; tetra is built with CUDA 13")
      fi
    fi
  else
    echo "no nvidia-smi"
    if ls /dev/nvidia[0-9]* > /dev/null 2>&1; then
      gpu=1
      echo "but /dev/nvidia* exist: $(ls /dev/nvidia[0-9]* | tr '\n' ' ')"
    fi
  fi
  echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-(unset)}"
  (( gpu )) || problems+=("no GPU: nvidia-smi lists none (or is missing) and there is no /dev/nvidia0")

  echo "== glibc"
  local have need="" need_file="" tool v files=()
  have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
  [[ -n $have ]] || have=$(ldd --version 2>/dev/null | head -n 1 | awk '{print $NF}')
  for f in "$bin"/tetra "$bin"/tetra_gpu_tests "$bin"/mpirun "$bin"/orted; do [[ -f $f ]] && files+=("$f"); done
  if (( bundle )); then
    while read -r f; do files+=("$f"); done < <(find "$dir/lib" -name '*.so*' -type f 2>/dev/null)
  fi
  if command -v objdump > /dev/null; then tool="objdump -T"
  elif command -v readelf > /dev/null; then tool="readelf -V"
  else tool="grep -ao"; fi
  for f in "${files[@]}"; do
    if [[ $tool == "grep -ao" ]]; then
      v=$(grep -ao 'GLIBC_2\.[0-9][0-9.]*' "$f" 2>/dev/null)
    else
      v=$(timeout 20 $tool "$f" 2>/dev/null | grep -o 'GLIBC_2\.[0-9][0-9.]*')
    fi
    v=$(sed 's/^GLIBC_//; s/\.$//' <<< "$v" | sort -uV | tail -n 1)
    if [[ -n $v && ( -z $need || $(printf '%s\n' "$need" "$v" | sort -V | tail -n 1) != "$need" ) ]]; then
      need=$v need_file=${f##*/}
    fi
  done
  if [[ -z $need ]]; then
    echo "glibc: this machine has ${have:-an unknown version}; found no GLIBC_ versions in the binaries"
  elif [[ -n $have && $(printf '%s\n' "$need" "$have" | sort -V | tail -n 1) == "$have" ]]; then
    echo "glibc: this machine has $have, the packed binaries need $need (by $tool, in $need_file): OK"
  else
    echo "glibc: this machine has ${have:-an unknown version}, the packed binaries need $need (by $tool, in $need_file): TOO OLD"
    problems+=("glibc ${have:-?} is older than the $need the binaries need ($need_file): build the bundle on an older distribution")
  fi

  echo "== /dev/shm"
  df -h /dev/shm 2>&1
  local shm_kb
  shm_kb=$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 {print $2}')
  if [[ -n $shm_kb ]] && (( shm_kb < 1048576 )); then
    echo "note: /dev/shm has $((shm_kb / 1024)) MiB: NCCL and Open MPI's shared memory may run out (docker --shm-size=8g)"
  fi
  echo "== CPUs and memory"
  echo "$(nproc 2>/dev/null) CPUs; $(awk '/MemTotal|MemAvailable/ {printf "%s %d GiB ", $1, $2 / 1048576}' /proc/meminfo 2>/dev/null)"

  echo "== CUDA 13 libraries"
  local binaries=()
  for f in "$bin"/tetra "$bin"/tetra_gpu_tests; do [[ -x $f ]] && binaries+=("$f"); done
  # In this shell: the directories it adds to LD_LIBRARY_PATH stay for every later part.
  find_cuda_libs "${binaries[@]}" > "$scratch/libs" 2>&1
  grep -v '^problem: ' "$scratch/libs"  # the verdict below lists them
  while read -r f; do problems+=("${f#problem: }"); done < <(grep '^problem: ' "$scratch/libs")

  echo "== ldd"
  for f in "$bin"/tetra "$bin"/tetra_gpu_tests "$bin"/mpirun "$bin"/orted; do
    [[ -f $f ]] || { [[ ${f##*/} == tetra* ]] && echo "-- ${f##*/}: missing"; continue; }
    echo "-- ${f##*/}"
    timeout 10 ldd "$f" 2>&1
    local nf
    nf=$(timeout 10 ldd "$f" 2>/dev/null | awk '$3 == "not" {print $1}' | paste -sd' ' -)
    [[ -n $nf ]] && problems+=("ldd ${f##*/}: not found: $nf")
  done
  [[ -x $bin/tetra ]] || problems+=("no $bin/tetra")
  echo "== verdict"
  for f in "${problems[@]}"; do echo "problem: $f"; done
  (( ${#problems[@]} == 0 )) && echo "preflight: OK"
  (( gpu ))
}

# The emulated GPU's preflight: what stands in for the device, and the binaries.
emulated_preflight() {
  echo "tetra GPU checks preflight, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), host $(hostname 2>/dev/null || cat /etc/hostname)"
  echo "checks from $root; binaries from $bin"
  echo "emulated GPU: ${TETRA_EMU_GPUS:-8} devices named NVIDIA H200 (TETRA_EMU_GPUS), CUDA threads as fibers on $(nproc) CPUs"
  local f missing=0
  for f in "$tetra" "$gpu_tests"; do
    if [[ -x $f ]]; then echo "-- ${f##*/}"; timeout 10 ldd "$f" 2>&1; else echo "problem: no $f"; missing=1; fi
  done
  (( missing )) || echo "preflight: OK"
}

source "$root/tools/gpu/find_cuda_libs.sh"
echo "== preflight"
start=$SECONDS
preflight_rc=0
if (( emulated )); then
  emulated_preflight > "$out/preflight.txt" 2>&1
else
  preflight > "$out/preflight.txt" 2>&1 || preflight_rc=$?
fi
no_gpu=$preflight_rc
# The key lines: the GPU, the driver's CUDA, glibc, /dev/shm, each library, the verdict.
{
  sed -n '1,2p' "$out/preflight.txt"
  grep -a '^bundle: ' "$out/preflight.txt"
  awk '/^== GPU/ {on = 1; next} /^== / {on = 0} on && /MiB/ && !/^name/ {print "GPU: " $0}' "$out/preflight.txt"
  grep -a -E '^(no nvidia-smi|driver.s CUDA|glibc: |emulated GPU: )' "$out/preflight.txt"
  awk '/^== \/dev\/shm/ {getline; getline; print "/dev/shm: " $0}' "$out/preflight.txt"
  grep -a -E '^(found |MISSING )' "$out/preflight.txt"
  sed -n 's/^wheel directory: /nvidia-* wheel directory: /p' "$out/preflight.txt"
  grep -a -E '^(note: |problem: |preflight: )' "$out/preflight.txt"
} | tee -a "$summary"
if grep -q '^problem: ' "$out/preflight.txt"; then
  record FAIL preflight $((SECONDS - start)) "$(grep -m1 '^problem: ' "$out/preflight.txt" | sed 's/^problem: //')"
else
  record PASS preflight $((SECONDS - start))
fi

finish() {
  say "== result: every part"
  local line
  for line in "${results[@]}"; do say "$line"; done
  (( no_gpu )) && say "no GPU here: the checks cannot pass"
  # What comes back from the GPU machine: files of at most 16 MiB.
  local f
  for f in "${logs[@]}"; do
    if [[ -f $out/$f ]] && (( $(stat -c %s "$out/$f") > 15 * 1024 * 1024 )); then
      { head -c 4M "$out/$f"; printf '\n[... cut: the file was %s bytes ...]\n' "$(stat -c %s "$out/$f")"
        tail -c 10M "$out/$f"; } > "$scratch/cut" && mv "$scratch/cut" "$out/$f"
    fi
  done
  local status=0
  (( failed || no_gpu )) && status=1
  echo "logs in $out (status $status)"
  exit $status
}
(( preflight_only )) && finish

# ---- the benchmarks -----------------------------------------------------
# bench NAME CONFIG LOG [SETS]: the benchmark's steps, then its steady state:
# the mean over the steps after the first two.
bench() {
  local name=$1 config=$2 log=$3 metrics=$scratch/$1_metrics.jsonl
  local sets=(--set "train.steps=$steps" --set "optimizer.warmup_steps=1" --set "log.metrics_path=$metrics")
  for s in ${4:-} ${BENCH_SETS:-}; do sets+=(--set "$s"); done
  part "$name benchmark ($config, $steps steps)" "$(limit 65)" "$log" "$tetra" train --config "$config" "${sets[@]}"
  # Which engine ran attention (cuDNN fused, or tetra's own kernel and why).
  grep -a -E 'attention (forward|backward) B [0-9]+ .*: ' "$out/$log" | sed 's/^.*\(attention \(forward\|backward\)\)/\1/' |
    sort -u | sed "s/^/$name: /" | tee -a "$summary"
  if [[ ! -s $metrics ]]; then say "$name: no metrics"; return; fi
  awk -F'[:,}]' -v name="$name" '{
      for (i = 1; i < NF; i++) {
        if ($i ~ /"tokens_per_s"/) tok = $(i + 1);
        if ($i ~ /"tflops"/) tf = $(i + 1);
        if ($i ~ /"mfu"/) mfu = $(i + 1);
        if ($i ~ /"step_time_s"/) st = $(i + 1);
        if ($i ~ /"device_mallocs"/) mallocs += $(i + 1);
      }
      if (NR > 2) { n++; stok += tok; stf += tf; smfu += mfu; sst += st }
    }
    END {
      if (n > 0) printf "%s steady state over %d steps: %.0f tokens/s, %.1f TFLOP/s, MFU %.1f%%, %.3f s/step; " \
                        "%d cudaMalloc/cudaFree calls in all %d steps\n",
                        name, n, stok / n, stf / n, 100 * smfu / n, sst / n, mallocs, NR
      else printf "%s: %d steps, none past the first two\n", name, NR
    }' "$metrics" | tee -a "$summary"
}
bench dense configs/bench_h200_1b.textproto bench.log "${emulated_sets:-}"
bench MoE configs/bench_h200_moe.textproto bench_moe.log "${emulated_sets:-} ${emulated_moe_sets:-}"

# ---- tests ----------------------------------------------------------------
# gtests NAME SECONDS FILTER [ENV...]: the tests of tetra_gpu_tests matching
# FILTER, each recorded, in gpu_tests.log; the ones that did not pass in the summary.
gtests() {
  local name=$1 seconds=$2 filter=$3
  shift 3
  local from
  from=$(($( [[ -f $out/gpu_tests.log ]] && wc -l < "$out/gpu_tests.log" || echo 0) + 1))
  part "$name" "$seconds" gpu_tests.log env "$@" bash tools/gpu/run_gtests.sh "$gpu_tests" "$filter" 30 $((seconds - 5))
  tail -n +"$from" "$out/gpu_tests.log" | grep -a -E '^tetra_gpu_tests(_emu)?: [0-9]+ tests in' | tee -a "$summary"
  tail -n +"$from" "$out/gpu_tests.log" | grep -a -E '^RESULT (FAIL|CRASH|TIMEOUT|NOTRUN) ' | head -n 30 | cut -c1-400 | tee -a "$summary"
}
gtests "gpu tests" "$(limit 90)" '*'
gtests "own attention (TETRA_CUDNN_ATTENTION=0)" "$(limit 20)" 'Ops/OpTableGpuTest.*attention*' TETRA_CUDNN_ATTENTION=0

layout_checks() {
  local what=$1 seconds=$2
  local from
  from=$(($( [[ -f $out/layouts.log ]] && wc -l < "$out/layouts.log" || echo 0) + 1))
  part "$what" "$seconds" layouts.log python3 tools/gpu/check_gpu_layouts.py "$tetra" "$scratch/$what" "$what" \
    $((seconds - 5)) $( ((emulated)) && echo --emulated)
  tail -n +"$from" "$out/layouts.log" | grep -a -E '^(ok|FAIL) ' | cut -c1-400 | tee -a "$summary"
}
layout_checks layouts "$(limit 120)"
layout_checks checkpoints "$(limit 30)"

# NCCL needs MPI initialised: one rank under the bundle's mpirun.
part "commbench (NCCL, world size 1)" "$(limit 20)" comm.log \
  mpirun --oversubscribe -np 1 "$tetra" commbench --device cuda --op all \
  --max-bytes "$( ((emulated)) && echo 1M || echo 64M)" --iters 5 --warmup 2
[[ ${results[-1]} == PASS* ]] && tail -n 12 "$out/comm.log" | grep -a -v '^(' | tee -a "$summary"

# ---- where the time goes ----------------------------------------------------
for config in configs/bench_h200_1b.textproto configs/bench_h200_moe.textproto; do
  name="dense profile" model_sets=${emulated_sets:-}
  [[ $config == *moe* ]] && name="MoE profile" model_sets="${emulated_sets:-} ${emulated_moe_sets:-}"
  profile_sets=(--set train.steps=3 --set optimizer.warmup_steps=1)
  for s in $model_sets ${BENCH_SETS:-}; do profile_sets+=(--set "$s"); done
  from=$(($( [[ -f $out/bench_profile.log ]] && wc -l < "$out/bench_profile.log" || echo 0) + 1))
  part "$name (TETRA_OP_PROFILE, 3 steps of $config, ops serialised)" "$(limit 25)" bench_profile.log \
    env TETRA_OP_PROFILE=1 "$tetra" train --config "$config" "${profile_sets[@]}"
  tail -n +"$from" "$out/bench_profile.log" |
    awk '/^tetra op profile/ {on = 1; print; next} on && /^  / {print; next} {on = 0}' | tee -a "$summary"
done
finish
