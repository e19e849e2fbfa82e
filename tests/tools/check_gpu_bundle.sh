#!/usr/bin/env bash
# The GPU bundle (tools/gpu/make_gpu_bundle.sh) runs a 2-rank CPU job by
# itself: packed from this build, unpacked in another place and launched
# with only the bundle's bin/ on PATH and a bare environment; where this
# user can make a mount namespace (root, as CI), the system's Open MPI
# components and PMIx plugins are hidden for the run, so it cannot lean on
# them. And every library its binaries and plugins load resolves inside it,
# but glibc's and CUDA's (which a GPU machine has).
# usage: check_gpu_bundle.sh BUILD_DIR
set -euo pipefail
if ! command -v ompi_info > /dev/null || ! command -v orted > /dev/null; then
  echo "skipped: no Open MPI (ompi_info, orted) to pack"
  exit 77
fi
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$1" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The bundle runs where it is built here, so a -march=native build will do.
TETRA_BUNDLE_NATIVE=1 "$root/tools/gpu/make_gpu_bundle.sh" "$build" "$work/out"
bundle=$work/unpacked
mkdir -p "$bundle" "$work/empty"
tar -xzf "$work/out/bundle.tar.gz" -C "$bundle"

# "libfoo.so.1 => /path (0x...)" or "=> not found", for every packed ELF file.
outside=$(find "$bundle/bin" "$bundle/lib" -type f ! -name env.sh |
  while read -r elf; do env -i bash -c "source '$bundle/bin/env.sh'; ldd '$elf'" 2>/dev/null || true; done |
  awk '$2 == "=>" {print $1, $3}' | grep -v " $bundle/" |
  grep -Ev '^(libc|libm|libdl|libpthread|librt|libutil|ld-linux[^ ]*|libcuda|libcudart|libcublas|libcublasLt|libnvidia[^ ]*|libnccl|libcudnn[^ ]*)\.so' |
  sort -u || true)
if [[ -n $outside ]]; then
  echo "FAIL: the bundle's files load libraries from outside it:"
  echo "$outside"
  exit 1
fi

job="source '$bundle/bin/env.sh' && export PATH='$bundle/bin' && cd '$work' && \
  mpirun --oversubscribe -np 2 tetra train --config '$root/configs/tiny_dense.textproto' \
    --set train.steps=2 --set parallel.tensor=2 --set train.threads=1 --set log.metrics_path='$work/metrics.jsonl'"
bare_env=(env -i "HOME=$work" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
system_plugins=()
for dir in "$(ompi_info --path pkglibdir --parsable | sed -n 's/^path:pkglibdir://p')" \
           /usr/lib/*/pmix*/lib/pmix; do
  [[ -d $dir ]] && system_plugins+=("$dir")
done
mkdir -p "$work/probe"
if unshare -m mount --bind "$work/empty" "$work/probe" 2>/dev/null; then
  hide=""
  for dir in "${system_plugins[@]}"; do hide+="mount --bind '$work/empty' '$dir' && "; done
  echo "running with ${system_plugins[*]} hidden"
  unshare -m bash -c "$hide $(printf '%q ' "${bare_env[@]}") bash -c $(printf '%q' "$job")"
else
  echo "no mount namespace here: running with the system's Open MPI plugins in place"
  "${bare_env[@]}" bash -c "$job"
fi
steps=$(wc -l < "$work/metrics.jsonl")
if [[ $steps != 2 ]]; then
  echo "FAIL: the bundle's 2-rank job wrote $steps metrics lines, not 2"
  exit 1
fi
echo "PASS: a 2-rank job ran from the unpacked bundle ($(du -h "$work/out/bundle.tar.gz" | cut -f1))"
