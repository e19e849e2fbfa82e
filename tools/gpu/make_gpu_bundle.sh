#!/usr/bin/env bash
# Packs what tools/gpu/run_gpu_checks.sh needs on a GPU machine that has only
# a driver and CUDA (no Open MPI, no compilers, no network) into one gzip'd
# tar: bin/ with `tetra`, all GPU tests in one binary (tetra_gpu_tests, where
# the build has CUDA) and Open MPI's launcher (mpirun) and daemon (orted);
# lib/ with every shared library they and Open MPI's components load, except
# CUDA's (cudart, cuBLAS, cuDNN, NCCL: the machine has its own, matching its
# driver, in its toolkit or in the nvidia-* Python wheels) and glibc's (it
# must match the machine's loader); Open MPI's components and help files
# where OPAL_PREFIX finds them; and bin/env.sh, which points everything there
# from wherever the bundle is unpacked and launches on this machine alone
# (no ssh); bin/bundle_info.txt says when and from which checkout it was
# packed and the glibc its binaries need (run_gpu_checks.sh's preflight
# prints it). tests/tools/check_gpu_bundle.sh runs a 2-rank job from a
# bundle; tests/tools/check_gpu_preflight.sh runs the preflight on one.
#
#   tools/gpu/make_gpu_bundle.sh [BUILD_DIR=build] [BUNDLE_DIR=build-gpu]
#   -> BUNDLE_DIR/bundle.tar.gz; carry it, then on the GPU machine:
#   tools/gpu/run_gpu_checks.sh BUNDLE_DIR
#
# BUILD_DIR should be configured with -DTETRA_NATIVE=OFF (x86-64-v3, which
# every GPU server's CPU runs): a -march=native build can crash on another
# vendor's chip, so packing one is refused unless TETRA_BUNDLE_NATIVE=1 (for
# a bundle that runs where it was built, as the test of this script does).
set -euo pipefail
build=${1:-build}
bundle=${2:-build-gpu}
[[ -x $build/tetra ]] || { echo "missing $build/tetra: ninja -C $build tetra tetra_gpu_tests" >&2; exit 1; }
if grep -q '^TETRA_NATIVE:BOOL=ON' "$build/CMakeCache.txt" && [[ ${TETRA_BUNDLE_NATIVE:-0} != 1 ]]; then
  echo "$build is built for this CPU (TETRA_NATIVE=ON), which another machine's may not run;" \
       "build a portable one: cmake -S . -B build-portable -G Ninja -DTETRA_NATIVE=OFF &&" \
       "ninja -C build-portable tetra tetra_gpu_tests" >&2
  exit 1
fi
mpirun=$(command -v mpirun) && orted=$(command -v orted) ||
  { echo "Open MPI's mpirun and orted are not on PATH (apt-get install openmpi-bin)" >&2; exit 1; }

# Open MPI's directories, relative to the prefix OPAL_PREFIX relocates.
ompi_path() { ompi_info --path "$1" --parsable | sed -n "s/^path:$1:\(.*\)/\1/p"; }
prefix=$(ompi_path prefix)
components=$(ompi_path pkglibdir)
help=$(ompi_path pkgdatadir)

staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
mkdir -p "$staging/bin" "$staging/lib" "$bundle"
binaries=("$build/tetra" "$mpirun" "$orted")
[[ -x $build/tetra_gpu_tests ]] && binaries+=("$build/tetra_gpu_tests")
for b in "${binaries[@]}"; do
  cp -L "$b" "$staging/bin/$(basename "$b")"
  strip --strip-unneeded "$staging/bin/$(basename "$b")" 2>/dev/null || true
done
mkdir -p "$staging/${components#"$prefix"/}" "$staging/${help#"$prefix"/}"
cp -L "$components"/*.so "$staging/${components#"$prefix"/}/"
cp -rL "$help"/. "$staging/${help#"$prefix"/}/"

# "libfoo.so.1 => /path/libfoo.so.1 (0x...)": every library any packed
# binary or plugin loads, unless it is CUDA's, the driver's or glibc's.
{ for b in "${binaries[@]}"; do echo "$b"; done; find "$staging" -name '*.so'; } |
  while read -r elf; do ldd "$elf" 2>/dev/null || true; done |
  awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -Ev '/(libcuda|libcudart|libcublas|libcublasLt|libnvidia|libnccl|libcudnn)[^/]*$' |
  grep -Ev '/(libc|libm|libdl|libpthread|librt|libutil|ld-linux[^/]*)\.so[^/]*$' |
  while read -r lib; do cp -L "$lib" "$staging/lib/"; done

cat > "$staging/bin/env.sh" <<EOF
# Sourced by bash: the bundle's launcher, libraries and Open MPI plugins, wherever it is unpacked.
bundle_root=\$(cd "\$(dirname "\${BASH_SOURCE[0]}")/.." && pwd)
export PATH="\$bundle_root/bin:\$PATH"
export LD_LIBRARY_PATH="\$bundle_root/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export OPAL_PREFIX="\$bundle_root"
export OMPI_MCA_plm=isolated                      # ranks on this machine: no ssh needed
export HWLOC_PLUGINS_PATH="\$bundle_root/lib/hwloc"  # none: hwloc's core finds the topology
EOF
# What the preflight prints about the bundle: where it comes from and the
# glibc it needs (the GPU machine may have no objdump to tell).
root=$(cd "$(dirname "$0")/../.." && pwd)
glibc=$(find "$staging" -type f \( -path '*/bin/*' -o -name '*.so*' \) | while read -r elf; do
          v=$(objdump -T "$elf" 2>/dev/null | grep -o 'GLIBC_2\.[0-9][0-9.]*' | sed 's/^GLIBC_//' | sort -uV | tail -n 1)
          if [[ -n $v ]]; then echo "$v ${elf##*/}"; fi
        done | sort -V | tail -n 1)
[[ -n $glibc ]] && need_glibc="${glibc%% *} or later (${glibc#* } does)" || need_glibc="? (no objdump here to tell)"
{
  echo "packed $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname 2>/dev/null) (glibc $(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')) from $(cd "$build" && pwd)"
  echo "checkout $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo ' with uncommitted changes')"
  echo "needs glibc $need_glibc; CUDA libraries loaded at start: $(ldd "$build/tetra" 2>/dev/null | awk '$1 ~ /^lib(cuda|cublas|cudnn|nccl|nvrtc)/ {print $1}' | paste -sd' ' -)"
} > "$staging/bin/bundle_info.txt"
tar -czf "$bundle/bundle.tar.gz" -C "$staging" .
echo "$bundle/bundle.tar.gz: $(du -h "$bundle/bundle.tar.gz" | cut -f1)" \
     "($(find "$staging/lib" -maxdepth 1 -type f | wc -l) libraries)"
