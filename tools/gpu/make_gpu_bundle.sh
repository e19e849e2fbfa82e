#!/usr/bin/env bash
# Packs what tools/gpu/run_gpu_checks.sh needs on a GPU machine that has only
# a driver and CUDA: the `tetra` binary, all GPU tests in one binary
# (tetra_gpu_tests) and every shared library they load that is neither CUDA's
# (the machine has its own, matching its driver) nor glibc's (it must match
# the machine's loader), into one gzip'd tar of bin/ and lib/.
#
#   tools/gpu/make_gpu_bundle.sh [BUILD_DIR=build] [BUNDLE_DIR=build-gpu]
#   -> BUNDLE_DIR/bundle.tar.gz; carry it, then on the GPU machine:
#   tools/gpu/run_gpu_checks.sh BUNDLE_DIR
set -euo pipefail
build=${1:-build}
bundle=${2:-build-gpu}
binaries=("$build/tetra" "$build/tetra_gpu_tests")
for b in "${binaries[@]}"; do
  [[ -x $b ]] || { echo "missing $b: ninja -C $build tetra tetra_gpu_tests" >&2; exit 1; }
done
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
mkdir -p "$staging/bin" "$staging/lib" "$bundle"
for b in "${binaries[@]}"; do
  cp "$b" "$staging/bin/"
  strip --strip-unneeded "$staging/bin/$(basename "$b")" 2>/dev/null || true
  # "libfoo.so.1 => /path/libfoo.so.1 (0x...)": keep the path unless it is
  # CUDA's, the driver's or glibc's.
  ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' |
    grep -Ev '/(libcuda|libcudart|libcublas|libcublasLt|libnvidia|libnccl|libcudnn)[^/]*$' |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|libutil|ld-linux[^/]*)\.so[^/]*$' |
    while read -r lib; do cp -L "$lib" "$staging/lib/"; done
done
tar -czf "$bundle/bundle.tar.gz" -C "$staging" bin lib
echo "$bundle/bundle.tar.gz: $(du -h "$bundle/bundle.tar.gz" | cut -f1) ($(ls "$staging/lib" | wc -l) libraries)"
