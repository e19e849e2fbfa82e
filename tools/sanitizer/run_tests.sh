#!/usr/bin/env bash
# The unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer
# (every report fatal), CPU only, -O1: tetra and the unit test binaries (not
# the mpi, gpu or benchmark ones) in build-asan/, then `ctest -L unit` there.
# About 15 minutes on 2 cores, which CI (.ci/run) leaves out to stay under
# 30 minutes: run it after changing memory-handling code.
# Excluded: the recipes.* checks, whole training runs to the loss floor
# (minutes in Release, past their timeouts at sanitizer speed), whose code the
# CLI, checkpoint and reference tests already run in short runs; and the
# reference.* comparisons, whose PyTorch side dominates and whose tetra runs
# the CLI tests cover at sanitizer speed.
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Release -DTETRA_SANITIZE=ON -DTETRA_CUDA=OFF
# The unit test binaries this build has (a CUDA-off build has no emulator tests).
built=$(ninja -C build-asan -t targets all | sed -n 's/^\([a-z0-9_]*_test\): CXX_EXECUTABLE.*/\1/p')
unit_tests=$(find tests -name '*_test.cc' ! -name '*_mpi_test.cc' ! -name '*_gpu_test.cc' \
             -printf '%f\n' | sed 's/\.cc$//' | grep -Fxf <(echo "$built"))
ninja -C build-asan tetra $unit_tests
# The Python the unit tests that compare with other tools' writers run
# (scripts/setup.sh makes it in build/).
ln -sfn "$PWD/build/pyenv" build-asan/pyenv
ctest --test-dir build-asan -L unit -E '^(recipes|reference)\.' --output-on-failure -j2
