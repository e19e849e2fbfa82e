#!/usr/bin/python3
"""Activation recompute gives bit-identical training under every layout.

train.recompute FULL keeps only each recomputed decoder block's input and
runs the block's forward again just before its backward; SELECTIVE keeps
each MLP's gate and up but computes the SwiGLU activation again (dense MLPs,
shared and routed experts). Either way the backward runs the same ops in the
same order, so every step's loss, gradient norm, multi-token prediction loss
and MoE balance terms must equal, bit for bit (metrics are written with every
digit of the double), those of the same layout without recompute. Two tiny
models, 6 steps each, in both modes:
  - dense Llama (GQA): one rank, tensor 2 with sequence parallelism, pipeline
    2 under 1F1B and interleaved (2 virtual stages; several micro-batches in
    flight share the recomputed blocks' one set of activations), dp 2 with
    ZeRO-1, and recompute_layers 1 (the first block of each chunk only);
  - DeepSeek-V3's shape (MLA, a dense first layer, MoE, one prediction depth):
    one rank, dp 2 with expert 2, pipeline 2, and tensor 2 x pipeline 2 x
    dp 2 with expert 2 on 8 ranks (the recompute runs the all-to-alls and
    tensor collectives again; routing stats must not count twice).
usage: check_recompute.py TETRA_BINARY [--list] [--case NAME[,NAME...]] [--work-dir DIR]
Each layout is a named case of CASES (--list prints them), which runs it
without recompute and in both modes (tests/testing/case_table.py).
"""
import functools
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "testing"))
from case_table import Case, main  # noqa: E402
from tetra_runs import TINY_MLA_MOE, train  # noqa: E402

COMMON = ["model.vocab_size=64", "model.hidden_size=32", "model.num_hidden_layers=4",
          "model.num_attention_heads=4", "model.intermediate_size=64", "train.global_batch_size=16",
          "train.micro_batch_size=2", "train.seq_length=16", "train.threads=1", "train.steps=6",
          "optimizer.lr=3e-3", "data.synthetic.order=1", "log.interval=1000"]
DENSE = COMMON + ["model.num_key_value_heads=2"]
DEEPSEEK = COMMON + TINY_MLA_MOE + ["model.num_nextn_predict_layers=1"]
LAYOUTS = [  # model name, model, layout name, ranks, sets
    ("dense", DENSE, "single", 1, []),
    ("dense", DENSE, "tp2_sp", 2, ["parallel.tensor=2", "parallel.sequence_parallel=true"]),
    ("dense", DENSE, "pp2_1f1b", 2, ["parallel.pipeline=2"]),
    ("dense", DENSE, "pp2_v2", 2, ["parallel.pipeline=2", "parallel.virtual_stages=2"]),
    ("dense", DENSE, "dp2_zero1", 2, ["optimizer.zero_stage=1"]),
    ("dense", DENSE, "first_block_only", 1, ["train.recompute_layers=1"]),
    ("deepseek", DEEPSEEK, "single", 1, []),
    ("deepseek", DEEPSEEK, "dp2_ep2", 2, ["parallel.expert=2"]),
    ("deepseek", DEEPSEEK, "pp2_1f1b", 2, ["parallel.pipeline=2"]),
    ("deepseek", DEEPSEEK, "tp2_pp2_dp2_ep2", 8, ["parallel.tensor=2", "parallel.pipeline=2", "parallel.expert=2"]),
]
FIELDS = ("loss", "grad_norm", "mtp_loss", "aux_loss", "moe_load_imbalance")


def equal_without(ctx, model_name, model, layout, ranks, sets):
    """The layout with FULL and SELECTIVE recompute against NONE, bit for bit."""
    runs = {}
    for mode in ("NONE", "FULL", "SELECTIVE"):
        runs[mode] = train(ctx.tetra, ctx.fresh(f"{model_name}_{layout}_{mode}"), ranks,
                           model + sets + [f"train.recompute={mode}"])
    plain = runs["NONE"]
    for mode in ("FULL", "SELECTIVE"):
        recomputed = runs[mode]
        differing = [(s["step"], f) for s, r in zip(plain, recomputed) for f in FIELDS if s.get(f) != r.get(f)]
        ctx.check(len(plain) == len(recomputed) == 6 and not differing,
                  f"{model_name} {layout}: 6 steps with {mode} recompute equal to without, bit for bit"
                  + (f" (first difference: step {differing[0][0]} {differing[0][1]})" if differing else ""))


CASES = [Case(f"{model_name}.{layout}", ranks, functools.partial(equal_without, model_name=model_name, model=model,
                                                                 layout=layout, ranks=ranks, sets=sets), runs=3)
         for model_name, model, layout, ranks, sets in LAYOUTS]

if __name__ == "__main__":
    main(__doc__, "recompute", CASES, [], "activation recompute trains bit-identically under every layout")
