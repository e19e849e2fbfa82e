#!/usr/bin/env bash
# Builds tetra's libFuzzer entry points (tools/fuzz/*_fuzzer.cc) into
# build-fuzz/ with clang (ASan + UBSan, CPU only), exports the fuzz tests'
# valid inputs as seed corpora, and runs each fuzzer for SECONDS seconds
# (default 120; 0 builds only). Inputs that break a rule land in
# build-fuzz/findings/<fuzzer>/; copy tiny ones into tests/fuzz/corpus/<parser>/.
#   tools/fuzz/run.sh [SECONDS] [FUZZER...]     e.g. tools/fuzz/run.sh 300 json_fuzzer
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-120}
shift || true
fuzzers=("$@")
if [ ${#fuzzers[@]} -eq 0 ]; then
  for src in tools/fuzz/*_fuzzer.cc; do fuzzers+=("$(basename "$src" .cc)"); done
fi
fuzz_tests=$(ls tests/fuzz/*_fuzz_test.cc | xargs -n1 basename | sed 's/\.cc$//')

CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DTETRA_FUZZERS=ON -DTETRA_CUDA=OFF >/dev/null
ninja -C build-fuzz tetra "${fuzzers[@]}" $fuzz_tests
[ "$seconds" -eq 0 ] && exit 0

seeds=$PWD/build-fuzz/seeds
for t in $fuzz_tests; do TETRA_FUZZ_SEEDS_DIR=$seeds build-fuzz/$t >/dev/null; done
export TETRA_FUZZ_CHECKPOINT_DATA=$seeds/checkpoint_manifest.data/rank_00000.bin
for f in "${fuzzers[@]}"; do
  parser=${f%_fuzzer}
  corpus=build-fuzz/corpus/$parser findings=build-fuzz/findings/$f
  mkdir -p "$corpus" "$findings"
  # The seeds, then the regression corpus (inputs that once broke the parser).
  cp -n "$seeds/$parser"/* "$corpus"/ 2>/dev/null || true
  [ -d "tests/fuzz/corpus/$parser" ] && cp -n "tests/fuzz/corpus/$parser"/* "$corpus"/
  echo "== $f for ${seconds}s"
  build-fuzz/$f -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=4096 -timeout=10 \
    -print_final_stats=1 -artifact_prefix="$findings/" "$corpus" 2>&1 | tail -4 || true
done
echo "findings: $(find build-fuzz/findings -type f | wc -l) file(s) under build-fuzz/findings/"
