#!/usr/bin/python3
"""The zero-bubble pipeline schedules train as the single rank does.

ZB-H1 and DualPipeV split every backward into B (input gradients) and W
(weight gradients), run later; DualPipeV also places two chunks per rank in
a V (rank r holds virtual stages r and 2p-1-r, so rank 0 holds the embedding
and the LM head) and hands activations between the two chunks of rank p-1
without a message. Each layout trains 8 steps of a tiny 8-layer model; every
step's loss, gradient norm (and, for the MoE model, multi-token prediction
loss, balance loss and load imbalance) must agree with the single rank's:
step 1 within 1e-5, all steps within 1e-4 (relative; reduction orders differ
across ranks). And the split backward changes no number: ZB-H1 gives bit for
bit the metrics of 1F1B on the same layout (each weight gradient gets its
micro-batches in the same order). Evaluation (forward only, through the V's
placement) gives the single rank's validation loss under DualPipeV too.
  - dense Llama (GQA): ZB-H1 and DualPipeV at pipeline 2 and 4, each with
    tensor 2 (sequence parallelism) and with dp 2 under ZeRO-1, and
    DualPipeV with selective recompute;
  - DeepSeek-V3's shape (MLA, MoE after a dense first layer, one prediction
    depth): DualPipeV at pipeline 2 with expert 2 (dp 2), and ZB-H1 the same;
  - uneven splits as Megatron-LM states them (the first and last stages'
    layers, the rest even): ZB-H1 at pipeline 4 with 1 first and 3 last, and
    DualPipeV at pipeline 2 with 2 first and none last, its last virtual
    stage the head, the loss and the prediction depth alone.
usage: check_pipeline_schedules.py TETRA_BINARY [--list] [--case NAME[,NAME...]] [--work-dir DIR]
Each comparison above is a named case of CASES (--list prints them), the
single-rank runs they compare against BASELINES, computed once and cached
(tests/testing/case_table.py).
"""
import functools
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "testing"))
from case_table import Case, main, train_baseline  # noqa: E402
from tetra_runs import TINY_MLA_MOE, rel, train, write_llmc_shard  # noqa: E402

STEPS = 8
COMMON = ["model.vocab_size=64", "model.hidden_size=32", "model.num_hidden_layers=8",
          "model.num_attention_heads=4", "model.intermediate_size=64", "train.global_batch_size=16",
          "train.micro_batch_size=2", "train.seq_length=16", "train.threads=1", f"train.steps={STEPS}",
          "optimizer.lr=3e-3", "data.synthetic.order=1", "log.interval=1000"]
DENSE = COMMON + ["model.num_key_value_heads=2"]
DEEPSEEK = COMMON + TINY_MLA_MOE + ["model.num_nextn_predict_layers=1"]
ZB = ["parallel.schedule=ZB_H1"]
DUALV = ["parallel.schedule=DUALPIPE_V", "parallel.virtual_stages=2"]
TP2 = ["parallel.tensor=2", "parallel.sequence_parallel=true"]
LAYOUTS = [  # model name, model, layout name, ranks, sets
    ("dense", DENSE, "zb_pp2", 2, ZB + ["parallel.pipeline=2"]),
    ("dense", DENSE, "zb_pp4", 4, ZB + ["parallel.pipeline=4"]),
    ("dense", DENSE, "zb_pp2_tp2", 4, ZB + ["parallel.pipeline=2"] + TP2),
    ("dense", DENSE, "zb_pp2_dp2_zero1", 4, ZB + ["parallel.pipeline=2", "optimizer.zero_stage=1"]),
    ("dense", DENSE, "dualv_pp2", 2, DUALV + ["parallel.pipeline=2"]),
    ("dense", DENSE, "dualv_pp4", 4, DUALV + ["parallel.pipeline=4"]),
    ("dense", DENSE, "dualv_pp2_tp2", 4, DUALV + ["parallel.pipeline=2"] + TP2),
    ("dense", DENSE, "dualv_pp2_dp2_zero1", 4, DUALV + ["parallel.pipeline=2", "optimizer.zero_stage=1"]),
    ("dense", DENSE, "dualv_pp2_selective", 2, DUALV + ["parallel.pipeline=2", "train.recompute=SELECTIVE"]),
    ("deepseek", DEEPSEEK, "dualv_pp2_ep2", 4, DUALV + ["parallel.pipeline=2", "parallel.expert=2"]),
    ("deepseek", DEEPSEEK, "zb_pp2_ep2", 4, ZB + ["parallel.pipeline=2", "parallel.expert=2"]),
    ("dense", DENSE, "zb_pp4_first1_last3", 4,
     ZB + ["parallel.pipeline=4", "parallel.pipeline_first_stage_layers=1", "parallel.pipeline_last_stage_layers=3"]),
    ("deepseek", DEEPSEEK, "dualv_pp2_first2_last0", 2,
     DUALV + ["parallel.pipeline=2", "parallel.pipeline_first_stage_layers=2",
              "parallel.pipeline_last_stage_layers=0"]),
]
# ZB-H1 against 1F1B on the same layout, bit for bit.
SAME_AS_1F1B = ("zb_pp2", "zb_pp4", "zb_pp2_dp2_zero1")
FIELDS = ("loss", "grad_norm", "mtp_loss", "aux_loss", "moe_load_imbalance")

MODELS = {"dense": DENSE, "deepseek": DEEPSEEK}


def matches(ctx, name, layout, ranks, sets):
    """The layout against the single rank; ZB-H1 against 1F1B too (SAME_AS_1F1B)."""
    model = MODELS[name]
    single = ctx.baseline(f"{name}.single").metrics
    got = train(ctx.tetra, ctx.fresh(f"{name}_{layout}"), ranks, model + sets)
    fields = [f for f in FIELDS if f in single[0]]
    first = max(rel(got[0][f], single[0][f]) for f in fields)
    worst = max(rel(r[f], s[f]) for r, s in zip(got, single) for f in fields)
    ctx.check(len(got) == len(single) == STEPS and first <= 1e-5 and worst <= 1e-4,
              f"{name} {layout} on {ranks} ranks: step 1 within {first:.1e} (<= 1e-5), "
              f"{STEPS} steps within {worst:.1e} (<= 1e-4) of the single rank")
    if layout in SAME_AS_1F1B:
        plain = train(ctx.tetra, ctx.fresh(f"{name}_{layout}_1f1b"), ranks, model + [s for s in sets if s not in ZB])
        differing = [(s["step"], f) for s, r in zip(plain, got) for f in fields if s.get(f) != r.get(f)]
        ctx.check(len(plain) == STEPS and not differing,
                  f"{name} {layout}: ZB-H1 equals 1F1B on the same layout bit for bit"
                  + (f" (first difference: step {differing[0][0]} {differing[0][1]})" if differing else ""))


# Validation: llm.c shards in the single-rank run's directory.
EVALUATED = DENSE + ["data.format=LLMC", "data.path={out}/train.bin", "data.valid_path={out}/valid.bin",
                     "log.eval_interval=4", "log.eval_batches=2"]


def write_shards(out):
    rng = random.Random(7)
    for name, count in (("train.bin", 20000), ("valid.bin", 4000)):
        write_llmc_shard(os.path.join(out, name), [rng.randrange(64) for _ in range(count)])


def validation_matches(ctx, layout, ranks, sets):
    ref = ctx.baseline("eval.single")
    evaluated = [s.replace("{out}", ref.path) for s in EVALUATED]
    val_ref = [m["val_loss"] for m in ref.metrics if "val_loss" in m]
    val_got = [m["val_loss"] for m in train(ctx.tetra, ctx.fresh(f"eval_{layout}"), ranks, evaluated + sets)
               if "val_loss" in m]
    worst = max(rel(g, r) for g, r in zip(val_got, val_ref)) if len(val_got) == len(val_ref) == 2 else float("inf")
    ctx.check(worst <= 1e-5, f"validation loss under {layout}: worst relative difference {worst:.1e} (<= 1e-5)")


BASELINES = [train_baseline(f"{name}.single", model) for name, model in MODELS.items()]
BASELINES.append(train_baseline("eval.single", EVALUATED, prepare=write_shards))
CASES = [Case(f"{name}.{layout}", ranks, functools.partial(matches, name=name, layout=layout, ranks=ranks, sets=sets),
              (f"{name}.single",), runs=2 if layout in SAME_AS_1F1B else 1)
         for name, _, layout, ranks, sets in LAYOUTS]
CASES += [Case(f"eval.{layout}", ranks, functools.partial(validation_matches, layout=layout, ranks=ranks, sets=sets),
               ("eval.single",))
          for layout, ranks, sets in (("dualv_pp2", 2, DUALV + ["parallel.pipeline=2"]),
                                      ("dualv_pp2_dp2", 4, DUALV + ["parallel.pipeline=2"]),
                                      ("zb_pp2", 2, ZB + ["parallel.pipeline=2"]))]

if __name__ == "__main__":
    main(__doc__, "pipeline_schedules", CASES, BASELINES,
         "the zero-bubble schedules (ZB-H1, DualPipeV) match the single rank")
