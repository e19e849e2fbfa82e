#!/usr/bin/env python3
"""The planner against this machine: runs configs/bench_cpu_scaling.textproto
at 1, 2, 4 and 8 ranks (tools/bench/cpu_runs.py's layouts, REPEATS runs each,
taking turns), calibrates a CPU cluster description (tools/bench/
calibrate_cpu.py) into a scratch file from the 1-, 2- and 4-rank runs, and
prints for every layout the measured step time (the fastest step after the
first over the runs: see cpu_runs.py for why) next to `tetra plan`'s
prediction; 8 ranks (tensor x pipeline x data) is a prediction from the
others alone. On a quiet machine the predictions land within about 25%.
usage: tools/bench/bench_cpu_scaling.py [TETRA_BINARY]   (default build/tetra)
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import calibrate_cpu  # noqa: E402
import cpu_runs  # noqa: E402


def main():
    tetra = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(cpu_runs.ROOT, "build", "tetra"))
    with tempfile.TemporaryDirectory() as out:
        measured = cpu_runs.measure(tetra, out)
        cluster = f"{out}/cpu.textproto"
        calibrate_cpu.calibrate(tetra, measured, cluster)
        print(f"{'ranks':>5}  {'layout (tp, pp, dp)':20}{'measured s':>12}{'predicted s':>13}{'error':>9}")
        for ranks, sets in cpu_runs.LAYOUTS.items():
            layout = cpu_runs.layout_of(sets, ranks)
            predicted = cpu_runs.predict(tetra, cluster, ranks, sets, layout)["step_s"]
            best = cpu_runs.fastest_step(measured[ranks])["step_time_s"]
            print(f"{ranks:5}  {str(layout):20}{best:12.4f}{predicted:13.4f}{100 * (predicted / best - 1):+8.1f}%")


if __name__ == "__main__":
    main()
