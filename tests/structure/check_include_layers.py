#!/usr/bin/env python3
"""Every library folder includes only itself and the folders above it in
docs/architecture.md's layer table (the order CMakeLists.txt links them in), so a
wrong-way include fails here, by name, even where no test's link would catch
it. Test code under tests/ may include anything of the layer it tests and
above, which its link already checks."""
import pathlib
import re
import sys

# Top to bottom: a folder may include the folders before it.
LAYERS = ["proto", "core", "kernels", "comm", "parallel", "moe", "model", "pipeline", "optimizer",
          "data", "checkpoint", "observe", "plan", "train", "launch", "tools"]

root = pathlib.Path(__file__).resolve().parents[2]
include = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')
problems = []
for rank, folder in enumerate(LAYERS):
    allowed = set(LAYERS[: rank + 1])
    for path in sorted((root / folder).rglob("*")):
        if path.suffix not in (".h", ".cc", ".cu", ".cuh"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            match = include.match(line)
            if match and match.group(1) in LAYERS and match.group(1) not in allowed:
                problems.append(f"{path.relative_to(root)}:{number}: {folder}/ includes "
                                f"{match.group(1)}/, a layer below it")
for problem in problems:
    print(problem)
if problems:
    sys.exit(1)
print(f"ok: {len(LAYERS)} layers include only themselves and the layers above them")
