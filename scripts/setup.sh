#!/usr/bin/env bash
# Installs tetra's Debian 12 build and test dependencies (idempotent) and
# builds it into build/ (with the emulated GPU's build, build/tetra_emu: see
# emulator/). CUDA parts are compiled when /usr/local/cuda exists,
# with the cuDNN frontend's headers (scripts/install_cudnn_frontend.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake g++ ninja-build pkg-config libabsl-dev libprotobuf-dev protobuf-compiler
          libgtest-dev libgmock-dev libbenchmark-dev libopenmpi-dev openmpi-bin
          libopenblas-openmp-dev libboost-context-dev python3-torch python3-numpy python3-pil
          python3-venv clang-format-14 iproute2
          chromium-headless-shell)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The checks against other projects' own code (transformers, TensorBoard,
# Megatron-Core) and tools/data/prepare.py run in build/pyenv: Debian's numpy
# plus the pinned PyPI packages, reinstalled when the pins change.
if ! cmp -s scripts/python_requirements.txt build/pyenv/installed_requirements.txt; then
  rm -rf build/pyenv
  mkdir -p build
  /usr/bin/python3 -m venv --system-site-packages build/pyenv
  build/pyenv/bin/pip install -q --disable-pip-version-check -r scripts/python_requirements.txt
  cp scripts/python_requirements.txt build/pyenv/installed_requirements.txt
fi

if [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
  scripts/install_cudnn_frontend.sh build/third_party/cudnn_frontend
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
ninja -C build
