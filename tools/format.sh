#!/usr/bin/env bash
# Formats every tracked C++/CUDA file with clang-format 14 (Debian 12's) and the
# repository's .clang-format; --check changes nothing and fails naming each file
# that formatting would change (ctest's structure.clang_format runs it).
set -euo pipefail
cd "$(dirname "$0")/.."
format=$(command -v clang-format-14 || true)
if [ -z "$format" ]; then
  echo "tools/format.sh: clang-format-14 is missing; bash scripts/setup.sh installs it" >&2
  exit 1
fi
mapfile -t files < <(git ls-files '*.h' '*.cc' '*.cu' '*.cuh')
if [ "${1:-}" != "--check" ]; then
  "$format" -i "${files[@]}"
  exit 0
fi
unformatted=()
for f in "${files[@]}"; do
  "$format" --dry-run --Werror "$f" >/dev/null 2>&1 || unformatted+=("$f")
done
if [ ${#unformatted[@]} -gt 0 ]; then
  printf '%s\n' "${unformatted[@]}"
  echo "${#unformatted[@]} file(s) not formatted as .clang-format says; run tools/format.sh" >&2
  exit 1
fi
echo "ok: ${#files[@]} C++/CUDA files formatted"
