#!/usr/bin/env bash
# Installs the cuDNN frontend's C++ headers (header-only; tetra's fused
# attention graphs are built with them) from PyPI's nvidia-cudnn-frontend
# wheel, at the pinned version, into DEST/include: the build tree, never the
# repository. Idempotent; pip comes from build/pyenv (scripts/setup.sh makes it).
#
#   scripts/install_cudnn_frontend.sh DEST   e.g. build/third_party/cudnn_frontend
set -euo pipefail
cd "$(dirname "$0")/.."
version=1.32.0  # the header API kernels/cuda/cudnn_attention.cc is written against
dest=${1:?usage: scripts/install_cudnn_frontend.sh DEST}
stamp=$dest/VERSION
[[ -f $stamp && $(cat "$stamp") == "$version" ]] && exit 0
pip=build/pyenv/bin/pip
[[ -x $pip ]] || pip="python3 -m pip"
wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
$pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
  -d "$wheels" "nvidia-cudnn-frontend==$version"
rm -rf "$dest/include"
mkdir -p "$dest"
python3 - "$wheels"/nvidia_cudnn_frontend-*.whl "$dest" <<'PY'
import sys, zipfile
wheel, dest = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    headers = [n for n in z.namelist() if n.startswith("include/")]
    if not any(n.endswith("/cudnn_frontend.h") for n in headers):
        sys.exit(f"{wheel} holds no include/cudnn_frontend.h")
    z.extractall(dest, headers)
PY
echo "$version" > "$stamp"
