#!/usr/bin/python3
"""PyTorch eager training throughput of the same Llama as a tetra recipe.

Uses the independent reference model of tests/reference/llama_reference.py
(plain PyTorch ops, torch.optim.AdamW, clip_grad_norm_) and times whole
optimizer steps on random tokens. Prints one JSON line:
{"tokens_per_s": ..., "step_s": [...], "threads": N}.

usage: torch_eager_llama.py --threads 2 --steps 6 -- [llama_reference flags]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tests", "reference"))
import llama_reference as ref  # noqa: E402


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup-steps", type=int, default=2)
    own, model_flags = ap.parse_known_args(argv)
    torch.set_num_threads(own.threads)
    a = ref.parse_args(["--out", "unused"] + [f for f in model_flags if f != "--"])
    params = ref.init_params(a)
    for p in params.values():
        p.requires_grad_(True)
    optimizer = ref.make_optimizer(params, a)
    gen = torch.Generator().manual_seed(0)
    times = []
    for step in range(own.warmup_steps + own.steps):
        samples = torch.randint(0, a.vocab, (a.global_batch, a.seq + 1), generator=gen)
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        ref.accumulate_grads(params, a, samples)
        torch.nn.utils.clip_grad_norm_(list(params.values()), a.clip)
        optimizer.step()
        if step >= own.warmup_steps:
            times.append(time.perf_counter() - start)
    step_s = statistics.median(times)
    print(json.dumps({"tokens_per_s": a.global_batch * a.seq / step_s, "step_s": times,
                      "threads": torch.get_num_threads()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
