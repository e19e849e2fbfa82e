# shellcheck shell=bash
# Sourced by tools/gpu/run_gpu_checks.sh (its preflight; tests/tools/check_gpu_preflight.sh tests it there):
# find_cuda_libs BINARY... looks for the CUDA 13 user libraries the binaries
# need and appends every directory it finds one in to LD_LIBRARY_PATH
# (exported), so that whatever runs next loads them; it prints one line per
# library:
#   found LIB at PATH [(-> FILE)], in WHERE[; also at PATH ...]
#   MISSING LIB (what needs it)
# then the Pythons it asked, the nvidia-* wheel directories they hold, and
# "problem: ..." lines for what will fail (a needed library missing, one
# whose own dependencies do not resolve, cuDNN or NVRTC without the
# libraries they load beside them). It returns 1 when there is a problem.
#
# tetra needs cuBLASLt when it is loaded (ldd lists it; the CUDA runtime is
# linked in statically); it dlopen()s libnccl.so.2 and libcudnn.so.9 when
# first used, cuDNN's frontend dlopen()s libcudart.so.13 and cuDNN NVRTC
# (libnvrtc.so.13) for its runtime-compiled attention engines, so ldd shows
# none of these: the loader's own rules are followed by hand. Where it looks,
# in order (the first hit is the one reported; the loader's pick, once the
# directories are added, is the one shown when it differs):
#   1. the directories in LD_LIBRARY_PATH;
#   2. the loader's cache (ldconfig -p), where the file still exists;
#   3. the CUDA toolkit: $CUDA_HOME, $CUDA_PATH, /usr/local/cuda*/{lib64,lib,
#      targets/*/lib}, /usr/local/nvidia/lib64;
#   4. the nvidia-* Python wheels (PyTorch's: nvidia-cublas, nvidia-cudnn-cu13,
#      nvidia-nccl-cu13, nvidia-cuda-nvrtc, ...; CUDA 13's put their libraries
#      in site-packages/nvidia/cu13/lib, cuDNN and NCCL theirs in
#      nvidia/cudnn/lib and nvidia/nccl/lib): site-packages/nvidia/*/lib of
#      every directory on sys.path and in site.getsitepackages() of every
#      python3 and python3.N on PATH, in $VIRTUAL_ENV, $CONDA_PREFIX,
#      ~/.venv, ~/venv, /venv, /opt/*/bin, /opt/*/*/bin, /opt/*/envs/*/bin,
#      /usr/local/bin and /usr/bin; then the usual places of pip installs
#      whether or not a Python runs: /usr/local/lib/python3*/{dist,site}-
#      packages, /usr/lib/python3/dist-packages, /opt/**/site-packages (to 4
#      levels) and ~/.local/lib/python3*/site-packages.
# Each external command runs under a timeout; asking the Pythons stops after
# 12 s in all, so the search takes a few seconds where nothing hangs.

# LIB|what needs it|required: "load" when required only if a binary's ldd lists it.
cuda_libs_wanted=(
  "libcudart.so.13|the CUDA runtime: tetra links its own copy statically, but cuDNN's frontend loads this one at run time for fused attention|yes"
  "libcublasLt.so.13|cuBLASLt: every GEMM; tetra and tetra_gpu_tests load it at start, nothing runs without it|yes"
  "libcublas.so.13|cuBLAS, beside cuBLASLt|load"
  "libcudnn.so.9|cuDNN fused attention, loaded at run time: without it tetra runs its own attention kernel, with a warning|yes"
  "libnccl.so.2|NCCL, loaded at run time: commbench and parallel.comm_backend NCCL|yes"
  "libnvrtc.so.13|NVRTC, loaded by cuDNN at run time for its runtime-compiled attention engines|yes"
)
# Libraries that must sit beside one that was found: they ship together and
# are loaded by name, so one from another installation would be a mismatch.
declare -A cuda_lib_siblings=(
  [libcudnn.so.9]="libcudnn_graph.so.9 libcudnn_ops.so.9 libcudnn_adv.so.9 libcudnn_heuristic.so.9 libcudnn_engines_precompiled.so.9 libcudnn_engines_runtime_compiled.so.9"
  [libnvrtc.so.13]="libnvrtc-builtins.so.13.0"
)

# The Python interpreters to ask, one path a line (a venv's python is kept
# beside its base interpreter: their sys.path differ).
cuda_python_candidates() {
  local d py key
  local -A seen=()
  local home=${HOME:-/root}
  local dirs=()
  IFS=: read -r -a dirs <<< "${PATH:-}"
  dirs+=("${VIRTUAL_ENV:+$VIRTUAL_ENV/bin}" "${CONDA_PREFIX:+$CONDA_PREFIX/bin}" "$home/.venv/bin" "$home/venv/bin"
         /root/.venv/bin /venv/bin /opt/*/bin /opt/*/*/bin /opt/*/envs/*/bin /usr/local/bin /usr/bin)
  for d in "${dirs[@]}"; do
    [[ -n $d && -d $d ]] || continue
    for py in "$d"/python3 "$d"/python3.[0-9] "$d"/python3.[0-9][0-9]; do
      [[ -f $py && -x $py ]] || continue
      key=$(readlink -f "$py")
      [[ -f $d/../pyvenv.cfg ]] && key+="|$(cd "$d/.." && pwd)"
      [[ -n ${seen[$key]:-} ]] && continue
      seen[$key]=1
      echo "$py"
    done
  done
}

# Directories that may hold nvidia-* wheels' libraries, one a line, those
# from the Pythons first; "python: PATH (N dirs)" lines go to fd 3.
cuda_wheel_dirs() {
  local py d start=$SECONDS
  local home=${HOME:-/root}
  local query='import sys
try:
    import site
    extra = list(site.getsitepackages()) + [site.getusersitepackages()]
except Exception:
    extra = []
for p in sys.path + extra:
    print(p)'
  while read -r py; do
    if (( SECONDS - start >= 12 )); then echo "python: $py (not asked: 12 s spent)" >&3; continue; fi
    local paths
    paths=$(timeout 5 "$py" -c "$query" 2>/dev/null) || { echo "python: $py (did not answer)" >&3; continue; }
    echo "python: $py ($(grep -c . <<< "$paths") sys.path/site entries)" >&3
    while read -r d; do
      [[ -n $d && -d $d/nvidia ]] || continue
      for lib in "$d"/nvidia/*/lib "$d"/nvidia/*/lib64; do [[ -d $lib ]] && echo "$lib"; done
    done <<< "$paths"
  done < <(cuda_python_candidates)
  local globs=(/usr/local/lib/python3*/{dist,site}-packages /usr/lib/python3/dist-packages
               /opt/{*,*/*,*/*/*,*/*/*/*}/lib/python3*/site-packages
               /opt/{*,*/*,*/*/*,*/*/*/*}/site-packages
               /root/.local/lib/python3*/site-packages "$home"/.local/lib/python3*/site-packages)
  for d in "${globs[@]}"; do
    for lib in "$d"/nvidia/*/lib "$d"/nvidia/*/lib64; do [[ -d $lib ]] && echo "$lib"; done
  done
  return 0
}

# Prints "DIR<TAB>WHERE" for every place to look, in search order ("@cache"
# stands for the loader's cache); the Pythons asked go to fd 3.
cuda_search_places() {
  local d
  local ld=()
  IFS=: read -r -a ld <<< "${LD_LIBRARY_PATH:-}"
  for d in "${ld[@]}"; do [[ -n $d && -d $d ]] && printf '%s\tLD_LIBRARY_PATH\n' "$d"; done
  printf '@cache\tthe loader cache (ldconfig -p)\n'
  for d in ${CUDA_HOME:+"$CUDA_HOME"/lib64 "$CUDA_HOME"/lib} ${CUDA_PATH:+"$CUDA_PATH"/lib64 "$CUDA_PATH"/lib} \
           /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/*/lib \
           /usr/local/cuda-*/lib64 /usr/local/cuda-*/lib /usr/local/cuda-*/targets/*/lib \
           /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
    [[ -d $d ]] && printf '%s\tthe CUDA toolkit\n' "$d"
  done
  while read -r d; do printf '%s\ta Python wheel\n' "$d"; done < <(cuda_wheel_dirs)
}

# The loader's cache: "LIB PATH" for every entry whose file exists.
cuda_ldconfig_entries() {
  local ldconfig name path
  ldconfig=$(command -v ldconfig || echo /sbin/ldconfig)
  timeout 10 "$ldconfig" -p 2>/dev/null | awk '$(NF-1) == "=>" {print $1, $NF}' |
    while read -r name path; do [[ -e $path ]] && echo "$name $path"; done
  return 0
}

# find_cuda_libs BINARY...: see the top of this file.
find_cuda_libs() {
  local log d w i s dup
  log=$(mktemp)
  local -a dirs=() wheres=()
  while IFS=$'\t' read -r d w; do
    [[ $d == @cache ]] || d=$(cd "$d" 2>/dev/null && pwd -P) || continue
    dup=0
    for s in "${dirs[@]}"; do [[ $s == "$d" ]] && { dup=1; break; }; done
    (( dup )) || { dirs+=("$d"); wheres+=("$w"); }
  done < <(cuda_search_places 3>"$log")
  local cache
  cache=$(cuda_ldconfig_entries)
  # What the binaries load at start ("LIB BINARY" from ldd, before any directory is added).
  local loadtime="" b
  for b in "$@"; do
    [[ -x $b ]] && loadtime+=$(timeout 10 ldd "$b" 2>/dev/null | awk -v b="${b##*/}" '{print $1, b}')$'\n'
  done

  local entry lib why required needers path h primary target
  local -a problems=() add=() hits=() others=()
  local -A reported=()
  local absent=""
  for entry in "${cuda_libs_wanted[@]}"; do
    IFS='|' read -r lib why required <<< "$entry"
    needers=$(awk -v l="$lib" '$1 == l {print $2}' <<< "$loadtime" | sort -u | paste -sd, - | sed 's/,/, /g')
    [[ -n $needers ]] && why+="; ldd: $needers load it at start"
    hits=()
    for i in "${!dirs[@]}"; do
      if [[ ${dirs[$i]} == @cache ]]; then
        path=$(awk -v l="$lib" '$1 == l {print $2; exit}' <<< "$cache")
      else
        path=${dirs[$i]}/$lib
      fi
      [[ -n $path && -e $path ]] && hits+=("$path|${wheres[$i]}")
    done
    if (( ${#hits[@]} == 0 )); then
      echo "MISSING $lib ($why)"
      absent+=" $lib"
      [[ $required == yes || -n $needers ]] && problems+=("$lib is missing ($why)")
      continue
    fi
    primary=${hits[0]%%|*}
    reported[$lib]=$primary
    add+=("$(dirname "$primary")")
    others=()
    for h in "${hits[@]:1}"; do
      [[ $(readlink -f "${h%%|*}") == "$(readlink -f "$primary")" ]] || others+=("${h%%|*}")
    done
    target=$(readlink -f "$primary")
    [[ $target == "$primary" ]] && target="" || target=" (-> $target)"
    echo "found $lib at $primary$target, in ${hits[0]#*|}${others[0]:+; also at ${others[*]}}"
  done

  # Append the directories, then check what the loader will now take.
  for d in "${add[@]}"; do
    case ":${LD_LIBRARY_PATH:-}:" in *":$d:"*) ;; *) LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d ;; esac
  done
  export LD_LIBRARY_PATH
  local first sib missing unresolved f nf
  local -a ld=()
  IFS=: read -r -a ld <<< "$LD_LIBRARY_PATH"
  for entry in "${cuda_libs_wanted[@]}"; do
    IFS='|' read -r lib why required <<< "$entry"
    first=""
    for d in "${ld[@]}"; do [[ -n $d && -e $d/$lib ]] && { first=$d/$lib; break; }; done
    [[ -n $first ]] || continue
    [[ $(readlink -f "$first") == "$(readlink -f "${reported[$lib]}")" ]] ||
      echo "note: with these directories the loader takes $lib from $first (first in LD_LIBRARY_PATH)"
    # Libraries that must sit beside it, and whether their own dependencies resolve.
    missing="" unresolved=""
    for sib in ${cuda_lib_siblings[$lib]:-}; do
      [[ -e $(dirname "$first")/$sib ]] || missing+=" $sib"
    done
    for f in "$first" ${cuda_lib_siblings[$lib]:-}; do
      [[ $f == /* ]] || f=$(dirname "$first")/$f
      [[ -e $f ]] || continue
      nf=$(timeout 10 ldd "$f" 2>/dev/null | awk -v m="$missing $absent " '$3 == "not" && index(m, " " $1 " ") == 0 {print $1}' |
           sort -u | paste -sd' ' -)
      [[ -n $nf ]] && unresolved+=" ${f##*/} needs $nf;"
    done
    [[ -n $missing ]] && problems+=("$lib at $first: missing beside it:$missing")
    [[ -n $unresolved ]] && problems+=("$lib at $first: its dependencies do not resolve:${unresolved%;}")
  done
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  cat "$log"
  local n=0
  for i in "${!dirs[@]}"; do
    [[ ${wheres[$i]} == "a Python wheel" ]] && { echo "wheel directory: ${dirs[$i]}"; n=$((n + 1)); }
  done
  (( n )) || echo "wheel directory: none found"
  rm -f "$log"
  local p
  for p in "${problems[@]}"; do echo "problem: $p"; done
  (( ${#problems[@]} == 0 ))
}
