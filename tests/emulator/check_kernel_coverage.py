#!/usr/bin/python3
"""Every __global__ kernel in kernels/cuda/*.cu ran on the emulated GPU.

usage: check_kernel_coverage.py SOURCE_DIR LOG_DIR
LOG_DIR holds the names of the kernels the emulated suite launched, one file
per process (the emulator writes them under TETRA_EMU_LAUNCH_LOG). Run by
ctest after every other emulated test (a fixture's cleanup); a kernel no test
launched is a failure naming it.
"""
import glob
import os
import re
import sys

source_dir, log_dir = sys.argv[1], sys.argv[2]
kernels = {}
for path in sorted(glob.glob(os.path.join(source_dir, "kernels", "cuda", "*.cu"))):
    with open(path) as f:
        for name in re.findall(r"__global__\s+void\s+(\w+)\s*\(", f.read()):
            kernels[name] = os.path.relpath(path, source_dir)
launched = set()
for path in glob.glob(os.path.join(log_dir, "*")):
    with open(path) as f:
        for line in f:
            # "tetra::cuda::RmsNormKernel<float>" -> "RmsNormKernel"
            launched.add(re.sub(r"<.*$", "", line.strip()).split("::")[-1])
missing = sorted(name for name in kernels if name not in launched)
if not kernels:
    sys.exit(f"no __global__ kernels found under {source_dir}/kernels/cuda")
if missing:
    print(f"{len(missing)} of {len(kernels)} kernels never ran on the emulated GPU "
          f"(run the whole `ctest -L emu`; a new kernel needs an op-table case):")
    for name in missing:
        print(f"  {name} ({kernels[name]})")
    sys.exit(1)
print(f"all {len(kernels)} kernels ran on the emulated GPU")
