#!/usr/bin/env bash
# The GPU checks' preflight (tools/gpu/run_gpu_checks.sh --preflight-only,
# run from a bundle of this build) finds CUDA 13's libraries where a GPU
# machine with only PyTorch has them: in the nvidia-* wheels of a Python
# environment, laid out as CUDA 13's wheels are (nvidia/cu13/lib for the
# runtime, cuBLAS and NVRTC, nvidia/cudnn/lib, nvidia/nccl/lib), with the
# CUDA toolkit and every other directory the loader cache knows them in
# hidden by tmpfs mounts in a mount namespace. The libraries in the tree are
# this machine's own, bind-mounted (a dummy file where there is none), so
# ldd of tetra resolves cuBLASLt inside the tree once the preflight has put
# it on LD_LIBRARY_PATH. Then, with libcublasLt.so.13 taken out of the tree,
# the preflight names it MISSING. Skips (77) where Open MPI is missing (the
# bundle packs it) or this user cannot make a mount namespace and mount.
# usage: check_gpu_preflight.sh BUILD_DIR
set -euo pipefail
if ! command -v ompi_info > /dev/null || ! command -v orted > /dev/null; then
  echo "skipped: no Open MPI (ompi_info, orted) to pack"
  exit 77
fi
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$1" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/probe"
if ! unshare -m --propagation private mount -t tmpfs none "$work/probe" 2>/dev/null; then
  echo "skipped: this user cannot mount a tmpfs in a mount namespace of its own (unshare -m: needs root)"
  exit 77
fi
TETRA_BUNDLE_NATIVE=1 "$root/tools/gpu/make_gpu_bundle.sh" "$build" "$work/bundle"

# A Python environment with the wheels' tree in its site-packages.
if /usr/bin/python3 -m venv --without-pip "$work/venv" 2>/dev/null; then
  site=$("$work/venv/bin/python3" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
else  # no venv module: a stand-in python3 that answers with the same site-packages
  site=$work/venv/lib/python3.11/site-packages
  mkdir -p "$work/venv/bin"
  printf '#!/bin/sh\necho %s\n' "$site" > "$work/venv/bin/python3"
  chmod +x "$work/venv/bin/python3"
fi
tree=$site/nvidia
declare -A wheel=([libcudart.so.13]=cu13 [libcublas.so.13]=cu13 [libcublasLt.so.13]=cu13
                  [libnvrtc.so.13]=cu13 [libnvrtc-builtins.so.13.0]=cu13 [libnccl.so.2]=nccl)
for lib in libcudnn.so.9 libcudnn_graph.so.9 libcudnn_ops.so.9 libcudnn_adv.so.9 libcudnn_heuristic.so.9 \
           libcudnn_engines_precompiled.so.9 libcudnn_engines_runtime_compiled.so.9; do
  wheel[$lib]=cudnn
done
wanted=(libcudart.so.13 libcublasLt.so.13 libcublas.so.13 libcudnn.so.9 libnccl.so.2 libnvrtc.so.13)

# This machine's copy of LIB (the loader cache's, else the toolkit's), or nothing.
source_of() {
  local path
  path=$(ldconfig -p 2>/dev/null | awk -v l="$1" '$1 == l {print $NF; exit}')
  [[ -n $path ]] || path=/usr/local/cuda/lib64/$1
  [[ -e $path ]] && readlink -f "$path"
  return 0
}
# Where the loader cache has any of the wanted libraries: hidden in the
# namespace, with the toolkit; system directories cannot be hidden, and a
# library found there is accepted wherever it is.
hide=()
for d in /usr/local/cuda /usr/local/cuda-*; do [[ -d $d ]] && hide+=("$(readlink -f "$d")"); done
declare -A anywhere=()
for lib in "${wanted[@]}"; do
  while read -r path; do
    for d in "$(dirname "$path")" "$(dirname "$(readlink -f "$path")")"; do
      case $d in
        /lib|/lib/*|/lib64|/lib64/*|/usr/lib|/usr/lib/*|/usr/lib64|/usr/lib64/*) anywhere[$lib]=1 ;;
        *) hide+=("$(readlink -f "$d")") ;;
      esac
    done
  done < <(ldconfig -p 2>/dev/null | awk -v l="$lib" '$1 == l {print $NF}')
done
# Each once, and none inside another (it would be hidden with it).
mapfile -t hide < <(printf '%s\n' "${hide[@]}" | sort -u | awk 'NR == 1 || index($0, last "/") != 1 {print; last = $0}')

# run_preflight OUT [LIB_LEFT_OUT]: the preflight in a namespace with the
# toolkit hidden and the tree in place (less LIB_LEFT_OUT).
run_preflight() {
  local out=$1 left_out=${2:-} lib mounts="" src dst
  rm -rf "$tree"
  for lib in "${!wheel[@]}"; do
    [[ $lib == "$left_out" ]] && continue
    dst=$tree/${wheel[$lib]}/lib/$lib
    mkdir -p "$(dirname "$dst")"
    : > "$dst"
    src=$(source_of "$lib")
    [[ -n $src ]] && mounts+="mount --bind '$src' '$dst' && "
  done
  for d in "${hide[@]}"; do mounts+="mount -t tmpfs none '$d' && "; done
  unshare -m --propagation private bash -c "$mounts env -i PATH='$work/venv/bin:/usr/bin:/bin' \
    HOME='$work' VIRTUAL_ENV='$work/venv' OUT='$out' \
    bash '$root/tools/gpu/run_gpu_checks.sh' --preflight-only '$work/bundle'" > "$out.log" 2>&1 || true
  if [[ ! -s $out/preflight.txt ]]; then
    echo "FAIL: the preflight wrote no preflight.txt; its output:"
    cat "$out.log"
    exit 1
  fi
}

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
echo "hidden: ${hide[*]}"
run_preflight "$work/out1"
tree_real=$(readlink -f "$tree")
for lib in "${wanted[@]}"; do
  if grep -q "^found $lib at $tree_real/" "$work/out1/preflight.txt"; then
    echo "ok   $(grep "^found $lib at " "$work/out1/preflight.txt" | cut -c1-160)"
  elif [[ -n ${anywhere[$lib]:-} ]] && grep -q "^found $lib at " "$work/out1/preflight.txt"; then
    echo "ok   $lib found in a system directory this test cannot hide: $(grep "^found $lib at " "$work/out1/preflight.txt")"
  else
    fail "the preflight did not find $lib in $tree_real: $(grep -E "(found|MISSING) $lib" "$work/out1/preflight.txt")"
  fi
done
if [[ -n $(source_of libcublasLt.so.13) ]] && ldd "$build/tetra" | grep -q libcublasLt.so.13; then
  if grep -q "libcublasLt.so.13 => $tree_real/" "$work/out1/preflight.txt"; then
    echo "ok   ldd tetra loads cuBLASLt from the wheel's tree (LD_LIBRARY_PATH is set for what runs next)"
  else
    fail "ldd tetra does not load cuBLASLt from $tree_real: $(grep 'libcublasLt' "$work/out1/preflight.txt" | tail -n 1)"
  fi
fi
grep -q '^wheel directory: ' "$work/out1/preflight.txt" || fail "preflight.txt names no wheel directory"
for key in 'glibc: ' '/dev/shm' 'found libcudnn.so.9 at ' 'preflight ('; do
  grep -qF "$key" "$work/out1/summary.txt" || fail "summary.txt lacks '$key'"
done

run_preflight "$work/out2" libcublasLt.so.13
if grep -q '^MISSING libcublasLt.so.13 (' "$work/out2/preflight.txt" &&
   grep -q '^MISSING libcublasLt.so.13 (' "$work/out2/summary.txt"; then
  echo "ok   $(grep '^MISSING libcublasLt.so.13' "$work/out2/preflight.txt")"
else
  fail "with libcublasLt.so.13 taken out, the preflight does not say MISSING: $(grep 'libcublasLt.so.13' "$work/out2/preflight.txt" | head -n 3)"
fi
grep -q '^problem: libcublasLt.so.13 is missing' "$work/out2/preflight.txt" || fail "no problem line for the missing cuBLASLt"
if (( failures > 0 )); then
  echo "--- preflight.txt of the first run:"
  cat "$work/out1/preflight.txt"
  exit 1
fi
echo "PASS: the preflight finds every CUDA 13 library in the wheels' tree with the toolkit hidden, and names a missing one"
