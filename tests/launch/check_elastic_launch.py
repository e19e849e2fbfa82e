#!/usr/bin/python3
"""tetra launch on one machine, under mpirun and under a fake srun.

  - lost rank: a 4-rank data-parallel job (global batch 16 in micro-batches
    of 2, checkpoints every 4 steps) under `tetra launch --np 4 --min-np 2`;
    once step 6 is logged one rank is killed with SIGKILL. The supervisor
    names it, re-plans for the 3 slots left (data 3 does not divide the 8
    micro-batches, so data 2 with twice the micro-batches per rank), resumes
    from the newest checkpoint and finishes: every step's loss equals the
    uninterrupted 4-rank run's within 1e-6, the steps after the checkpoint
    redone, and the restart is an event line in the metrics;
  - an error a restart cannot fix (a loss that diverges) ends the launch
    after one attempt, with the error;
  - Slurm: with SLURM_JOB_NODELIST node[01-02] and a fake `srun` on PATH that
    records its arguments, reports node02's task 3 killed the first time and
    then runs the tasks here under mpirun, the relaunch excludes node02 (srun
    --exclude) and runs 2 tasks, data 2, to the end.
usage: check_elastic_launch.py TETRA_BINARY
"""
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "testing"))
from tetra_runs import ENV, Checker, metrics_so_far, run_tetra  # noqa: E402

TETRA = sys.argv[1]
CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "configs", "tiny_dense.textproto")
STEPS = 40
SETS = ["train.micro_batch_size=2", f"train.steps={STEPS}", "train.threads=1",
        "log.interval=1000", "model.hidden_size=32", "model.intermediate_size=64"]


def sets_args(sets):
    return [arg for s in sets for arg in ("--set", s)]


def rank_pid(marker, rank):
    """The pid of the training rank `rank` whose TETRA_LAUNCH_DIR holds `marker`."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if (any(e.startswith(b"TETRA_LAUNCH_DIR=") and marker.encode() in e for e in env)
                and f"OMPI_COMM_WORLD_RANK={rank}".encode() in env):
            return int(pid)
    return None


def lost_rank_case(check, work):
    reference = f"{work}/reference.jsonl"
    run_tetra([TETRA, "train", "--config", CONFIG] +
              sets_args(SETS + [f"log.metrics_path={reference}"]), ranks=4)
    metrics, ckpt = f"{work}/elastic.jsonl", f"{work}/ckpt"
    launch = subprocess.Popen(
        [TETRA, "launch", "--np", "4", "--min-np", "2", "--max-restarts", "2", "--", "train",
         "--config", CONFIG] + sets_args(SETS + [f"log.metrics_path={metrics}",
                                                f"checkpoint.dir={ckpt}", "checkpoint.interval=4"]),
        env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    killed = None
    while launch.poll() is None and killed is None:
        if any(line.get("step", 0) >= 6 for line in metrics_so_far(metrics)):
            pid = rank_pid(ckpt, 1)
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
                killed = pid
        time.sleep(0.01)
    output = launch.communicate(timeout=600)[0]
    check("the launch finishes after the kill", killed is not None and launch.returncode == 0,
          output[-3000:])
    lines = metrics_so_far(metrics)
    events = [line for line in lines if "event" in line]
    steps = [line for line in lines if "step" in line]
    check("one restart event naming rank 1, going on with data 2 from a checkpoint",
          len(events) == 1 and "lost rank 1" in events[0]["cause"] and events[0]["data"] == 2
          and events[0]["world_size"] == 2 and events[0]["resumed_step"] % 4 == 0
          and events[0]["resumed_step"] >= 4, events)
    check("the launch log names the lost rank and the new layout",
          "lost rank 1 on host" in output and "x data 2)" in output, output[-3000:])
    want = [line["loss"] for line in metrics_so_far(reference)]
    got = [line["loss"] for line in steps]
    check(f"steps 1..{STEPS} each once", [line["step"] for line in steps] == list(range(1, STEPS + 1)),
          [line["step"] for line in steps])
    worst = max((abs(a - b) for a, b in zip(got, want)), default=float("inf"))
    check(f"every step's loss equals the uninterrupted run's within 1e-6 (worst {worst:.2e})",
          len(got) == len(want) and worst <= 1e-6)


def fatal_error_case(check, work):
    done = subprocess.run(
        [TETRA, "launch", "--np", "2", "--", "train", "--config", CONFIG] +
        sets_args(SETS + ["optimizer.lr=1e6", "optimizer.warmup_steps=0", f"checkpoint.dir={work}/fatal"]),
        env=ENV, capture_output=True, text=True, timeout=600)
    check("a diverging run is not restarted",
          done.returncode == 1 and "a restart cannot fix" in done.stderr
          and done.stdout.count("tetra launch: starting") == 1, done.stdout[-2000:] + done.stderr[-2000:])


FAKE_SRUN = """#!/bin/bash
# Records its arguments. The first time it reports node02's task 3 killed, as
# srun does; then it runs the tasks here under mpirun, its options dropped.
echo "$*" >> "{log}"
if [ "$(wc -l < "{log}")" = 1 ]; then
  echo "srun: error: node02: task 3: Killed" >&2
  exit 137
fi
ntasks=$(echo "$*" | sed -n 's/.*--ntasks=\\([0-9]*\\).*/\\1/p')
while [ "${{1#--}}" != "$1" ]; do shift; done
exec mpirun --oversubscribe -np "$ntasks" "$@"
"""


def slurm_case(check, work):
    bin_dir, log = f"{work}/fakebin", f"{work}/srun.log"
    os.makedirs(bin_dir)
    with open(f"{bin_dir}/srun", "w") as f:
        f.write(FAKE_SRUN.format(log=log))
    os.chmod(f"{bin_dir}/srun", 0o755)
    env = dict(ENV, PATH=f"{bin_dir}:{ENV['PATH']}", SLURM_JOB_NODELIST="node[01-02]",
               SLURM_NTASKS_PER_NODE="2")
    done = subprocess.run(
        [TETRA, "launch", "--np", "4", "--min-np", "2", "--", "train", "--config", CONFIG] +
        sets_args(SETS + [f"checkpoint.dir={work}/slurm"]),
        env=env, capture_output=True, text=True, timeout=600)
    calls = open(log).read().splitlines() if os.path.exists(log) else []
    check("the launch goes on after node02 is lost", done.returncode == 0,
          done.stdout[-2000:] + done.stderr[-2000:])
    check("srun starts 4 tasks on 2 nodes, data 4",
          len(calls) == 2 and "--nodes=2 --ntasks=4 --ntasks-per-node=2" in calls[0]
          and "--set parallel.data=4" in calls[0] and "--exclude" not in calls[0], calls)
    check("then 2 tasks on 1 node with node02 excluded, data 2",
          len(calls) == 2 and "--nodes=1 --ntasks=2 --ntasks-per-node=2" in calls[1]
          and "--exclude=node02" in calls[1] and "--set parallel.data=2" in calls[1], calls)


def main():
    checker = Checker()

    def check(what, ok, detail=""):
        checker(ok, what if ok else f"{what}\n{detail}")

    with tempfile.TemporaryDirectory() as work:
        slurm_case(check, work)
        fatal_error_case(check, work)
        lost_rank_case(check, work)
    checker.exit("tetra launch restarts lost ranks on the same loss curve")


if __name__ == "__main__":
    main()
