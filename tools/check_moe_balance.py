#!/usr/bin/python3
"""Aux-loss-free load balancing on the tiny MoE recipe, with and without the bias.

Trains configs/tiny_moe.textproto for 200 steps twice on one rank: with the
recipe's bias_update_speed and with 0 (no balancing), and prints the
`moe_load_imbalance` metric (max over MoE layers of max / mean tokens per
expert in the step's global batch) at step 200 and averaged over steps
181-200 (one step's loads are a sample of 1024 tokens; the mean evens out its
noise). Exits non-zero unless balancing brings the late mean below 1.3 and
below the unbalanced run's.
usage: check_moe_balance.py TETRA_BINARY [--steps N]
"""
import json
import os
import subprocess
import sys
import tempfile

TETRA = sys.argv[1]
STEPS = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 200
RECIPE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs", "tiny_moe.textproto")
WINDOW = 20


def run(path, sets):
    cmd = [TETRA, "train", "--config", RECIPE, "--set", f"train.steps={STEPS}",
           "--set", f"log.metrics_path={path}", "--set", "log.interval=1000"]
    for s in sets:
        cmd += ["--set", s]
    subprocess.run(cmd, check=True, capture_output=True)
    return [json.loads(line) for line in open(path)]


with tempfile.TemporaryDirectory() as tmp:
    results = {}
    for name, sets in (("balancing on", []), ("balancing off", ["model.moe.bias_update_speed=0"])):
        steps = run(os.path.join(tmp, name.replace(" ", "_") + ".jsonl"), sets)
        late = [s["moe_load_imbalance"] for s in steps[-WINDOW:]]
        results[name] = sum(late) / len(late)
        print(f"{name}: max/mean expert load at step {STEPS} {steps[-1]['moe_load_imbalance']:.3f}, "
              f"mean over the last {WINDOW} steps {results[name]:.3f} (max {max(late):.3f}), "
              f"loss {steps[-1]['loss']:.4f}")

ok = results["balancing on"] < 1.3 and results["balancing on"] < results["balancing off"]
print("ok" if ok else "FAIL: balancing does not bring the load imbalance below 1.3")
sys.exit(0 if ok else 1)
