#!/usr/bin/env python3
"""Calibrates configs/clusters/cpu_2core.textproto, the planner's description
of this machine's CPU (tetra plan --cluster), from measured runs of
configs/bench_cpu_scaling.textproto:

  peak_tflops        the node's rate: the model's FLOPs of a step over the
                     forward + backward seconds of a rank when as many ranks
                     as cores (2) share the step (compute_efficiency 1)
  thread_efficiency  one rank on all cores (threads = cores) against that
  memory_gbps        AdamW's bytes (2 x params x (4 + 4 + 8)) over optimizer_s
  step_overhead_s    one-rank step time not in forward, backward, optimizer
  nvlink_latency_us  from 4 ranks (tensor 2 x data 2, two ranks per core): the
                     step time the latency-free model misses, over the
                     model's latency count (its step time's slope in latency)

Every layout runs tools/bench/cpu_runs.py's REPEATS times, taking turns.

usage: calibrate_cpu.py TETRA_BINARY [OUT.textproto]
Writes the description (by default configs/clusters/cpu_2core.textproto) and
prints the measured values.
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import cpu_runs  # noqa: E402

TEMPLATE = """\
# This machine's CPU as `tetra plan --cluster` sees it: {cores} shared cores
# running 1-8 ranks under mpirun --oversubscribe, fp32. Written by
# tools/bench/calibrate_cpu.py from measured runs of
# configs/bench_cpu_scaling.textproto; rerun it on other hardware.
name: "cpu_{cores}core"
nodes: 1
devices_per_node: 8             # ranks that may share the node
shared_compute: true
cores_per_node: {cores}
peak_tflops: {peak:.6g}         # the node's achieved fp32 rate (measured)
compute_efficiency: 1
thread_efficiency: {thread:.4g}
hbm_bytes: {memory:.4g}         # the node's RAM
usable_memory_fraction: 0.8
memory_gbps: {memory_gbps:.4g}
nvlink_gbps: {copy_gbps:.4g}     # shared-memory transport: copies at memory speed
nvlink_latency_us: {latency:.4g}
ib_gbps: {copy_gbps:.4g}
ib_latency_us: {latency:.4g}
dp_overlap: 0                   # MPI progresses only inside MPI calls
step_overhead_s: {overhead:.4g}
weight_bytes: 4
grad_bytes: 4
optimizer_bytes: 8
activation_bytes: 4
"""


def main():
    tetra = os.path.abspath(sys.argv[1])
    path = sys.argv[2] if len(sys.argv) > 2 else cpu_runs.CLUSTER
    with tempfile.TemporaryDirectory() as out:
        calibrate(tetra, cpu_runs.measure(tetra, out), path)


def calibrate(tetra, runs, path, cores=2):
    """Writes the description of `cores` cores to `path` from `runs`
    (cpu_runs.measure: the 1-, 2- and 4-rank layouts are used; the 2-rank
    data-parallel run has one rank per core) and prints the values."""
    one = cpu_runs.fastest_step(runs[1])
    per_core = cpu_runs.fastest_step(runs[cores])
    # FLOPs of a step: tflops is per rank and second.
    flops = one["tflops"] * 1e12 * one["step_time_s"]
    compute_one = one["fwd_s"] + one["bwd_s"]
    # Each of `cores` ranks computes flops / cores at the node's rate / cores.
    node_rate = flops / (per_core["fwd_s"] + per_core["bwd_s"])
    values = {
        "cores": cores,
        "peak": node_rate / 1e12,
        "thread": flops / node_rate / compute_one,
        "memory": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
        "memory_gbps": 2 * params_of(tetra) * (4 + 4 + 8) / one["optimizer_s"] / 1e9,
        "overhead": max(0.0, one["step_time_s"] - compute_one - one["optimizer_s"]),
        "latency": 0.0,
    }
    values["copy_gbps"] = values["memory_gbps"] / 2  # a copy reads and writes
    write(values, path)
    # Latency: the 4-rank step the latency-free model misses, over its slope.
    sets = cpu_runs.LAYOUTS[4]
    layout = cpu_runs.layout_of(sets, 4)
    base = cpu_runs.predict(tetra, path, 4, sets, layout)["step_s"]
    values["latency"] = 1.0
    write(values, path)
    slope = cpu_runs.predict(tetra, path, 4, sets, layout)["step_s"] - base
    values["latency"] = max(0.0, (cpu_runs.fastest_step(runs[4])["step_time_s"] - base) / slope)
    write(values, path)
    for key, value in values.items():
        print(f"{key}: {value:.6g}")


def params_of(tetra):
    """The model's parameter count, from the progress line of a one-step run."""
    out = subprocess.run([tetra, "train", "--config", cpu_runs.CONFIG, "--set", "train.steps=1"],
                         check=True, capture_output=True, text=True).stdout
    # "tetra: 4-layer model, 3412224 parameters | ..."
    return float(out.split(" parameters")[0].split()[-1])


def write(values, path):
    with open(path, "w") as f:
        f.write(TEMPLATE.format(**values))


if __name__ == "__main__":
    main()
