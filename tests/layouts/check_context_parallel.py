#!/usr/bin/python3
"""Context parallelism trains as the single rank does, under every layout.

Each sequence is split over the context group (2 x cp chunks, rank r holding
chunks r and 2cp - 1 - r) and attention runs as a ring; the loss and dense
gradients add up over data x context. A run's first step must match the
single rank's within 1e-5 (loss, gradient norm; MoE balance loss and load
imbalance) and 12 steps within 1e-4: the ring merges partial attentions and
sums dK/dV in another order, so the bits differ, not the math. Models (tiny,
sequences of 32 tokens, so cp 4 has chunks of 4):
  - dense Llama (GQA 4/2): cp 2, cp 4, cp 2 x tp 2 with sequence parallelism,
    cp 2 x dp 2 with ZeRO-1, cp 2 x pp 2 (1F1B), cp 2 x tp 2 x pp 2 (8 ranks),
    cp 2 with FULL recompute;
  - MLA + MoE (DeepSeek-V3's attention and router; sequence-wise balance loss,
    whose per-sequence statistics sum over the context group): cp 2,
    cp 2 with expert 2 (expert-data parallel over data x context).
usage: check_context_parallel.py TETRA_BINARY [--list] [--case NAME[,NAME...]] [--work-dir DIR]
Each layout is a named case of CASES (--list prints them), the single-rank
runs they compare against BASELINES, computed once and cached
(tests/testing/case_table.py).
"""
import functools
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "testing"))
from case_table import Case, main, train_baseline  # noqa: E402
from tetra_runs import TINY_MLA_MOE, rel, train  # noqa: E402

STEPS = 12
COMMON = ["model.vocab_size=64", "model.hidden_size=32", "model.num_hidden_layers=4",
          "model.num_attention_heads=4", "model.intermediate_size=64", "train.global_batch_size=8",
          "train.micro_batch_size=2", "train.seq_length=32", "train.threads=1", f"train.steps={STEPS}",
          "optimizer.lr=3e-3", "data.synthetic.order=1", "log.interval=1000"]
DENSE = COMMON + ["model.num_key_value_heads=2"]
MLA_MOE = COMMON + TINY_MLA_MOE
LAYOUTS = [  # model name, model, layout name, ranks, sets
    ("dense", DENSE, "cp2", 2, ["parallel.context=2"]),
    ("dense", DENSE, "cp4", 4, ["parallel.context=4"]),
    ("dense", DENSE, "cp2_tp2_sp", 4, ["parallel.context=2", "parallel.tensor=2", "parallel.sequence_parallel=true"]),
    ("dense", DENSE, "cp2_dp2_zero1", 4, ["parallel.context=2", "optimizer.zero_stage=1"]),
    ("dense", DENSE, "cp2_pp2", 4, ["parallel.context=2", "parallel.pipeline=2"]),
    ("dense", DENSE, "cp2_tp2_pp2", 8, ["parallel.context=2", "parallel.tensor=2", "parallel.pipeline=2"]),
    ("dense", DENSE, "cp2_full_recompute", 2, ["parallel.context=2", "train.recompute=FULL"]),
    ("mla_moe", MLA_MOE, "cp2", 2, ["parallel.context=2"]),
    ("mla_moe", MLA_MOE, "cp2_ep2", 2, ["parallel.context=2", "parallel.expert=2"]),
]
FIELDS = ("loss", "grad_norm", "aux_loss", "moe_load_imbalance")

MODELS = {"dense": DENSE, "mla_moe": MLA_MOE}


def matches(ctx, name, layout, ranks, sets):
    single = ctx.baseline(f"{name}.single").metrics
    run = train(ctx.tetra, ctx.fresh(f"{name}_{layout}"), ranks, MODELS[name] + sets)
    fields = [f for f in FIELDS if f in single[0]]
    first = max(rel(run[0][f], single[0][f]) for f in fields)
    worst = max(rel(r[f], s[f]) for r, s in zip(run, single) for f in fields)
    ctx.check(len(run) == len(single) == STEPS and first <= 1e-5 and worst <= 1e-4,
              f"{name} {layout} on {ranks} ranks: step 1 within {first:.1e} (<= 1e-5), "
              f"{STEPS} steps within {worst:.1e} (<= 1e-4) of the single rank")


BASELINES = [train_baseline(f"{name}.single", model) for name, model in MODELS.items()]
CASES = [Case(f"{name}.{layout}", ranks, functools.partial(matches, name=name, layout=layout, ranks=ranks, sets=sets),
              (f"{name}.single",))
         for name, _, layout, ranks, sets in LAYOUTS]

if __name__ == "__main__":
    main(__doc__, "context_parallel", CASES, BASELINES,
         "context parallelism matches the single rank under every layout")
