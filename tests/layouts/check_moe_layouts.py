#!/usr/bin/python3
"""MoE layout equivalence: expert-parallel layouts train like the single rank.

Runs the same tiny mixture-of-experts model (8 routed experts, top-2 of 2
groups, one shared expert, a dense first layer; bias balancing and the
balance loss on) with the same seed and synthetic data on one rank and under
`mpirun`, and checks (docs/architecture.md principle 2):
  - ep 2 and ep 4 carved out of dp 4, ZeRO-0 and ZeRO-1: step-1 loss and
    gradient norm within 1e-5 relative of the single rank, the loss at every
    one of 20 steps within 1e-4, and the same aux loss and expert loads
    (moe_load_imbalance) at step 1,
  - tensor 2 x dp 2 with ep 2 (tensor-parallel experts) the same,
  - pipeline 2 x dp 2 with ep 2 (1F1B, and interleaved with 2 virtual
    stages) and the full 4D layout tensor 2 x pipeline 2 x dp 2 with ep 2 on
    8 ranks (4 layers, 8 micro-batches per step) the same,
  - weights exported after 5 steps under dp 4 ep 4 and under tensor 2 x dp 2
    with ep 2 hold every expert under its DeepSeek-V3 name and equal the
    single-rank export to 1e-5, and a run importing them (init_from) under
    ep 4 starts at the single-rank import's step-1 loss (1e-5 relative),
  - every layout of the first three items again with train.precision BF16
    against the single-rank bf16 run (step 1 within 1e-3, 20 steps within
    3e-3), and that run off the fp32 one by bf16 round-off, not by 0; the
    bf16 runs move tensors through the staged backend (parallel.comm_backend
    MPI), which checks NCCL's rules: no tags, the same collectives in the
    same order on every rank, all-to-all counts that agree.
usage: check_moe_layouts.py TETRA_BINARY [--list] [--case NAME[,NAME...]] [--work-dir DIR]
Each comparison above is a named case of CASES (--list prints them), the
single-rank runs they compare against BASELINES, computed once and cached
(tests/testing/case_table.py).
"""
import functools
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "testing"))
from case_table import Case, main, train_baseline  # noqa: E402
from tetra_runs import check_bf16_is_used, max_abs_difference, read_safetensors, rel, train  # noqa: E402

MODEL = ["model.vocab_size=64", "model.hidden_size=32", "model.num_hidden_layers=2",
         "model.num_attention_heads=4", "model.num_key_value_heads=2",
         "model.intermediate_size=64", "model.moe.n_routed_experts=8",
         "model.moe.num_experts_per_tok=2", "model.moe.n_shared_experts=1",
         "model.moe.moe_intermediate_size=16", "model.moe.first_k_dense_replace=1",
         "model.moe.n_group=2", "model.moe.topk_group=1", "model.moe.routed_scaling_factor=2.5",
         "model.moe.aux_loss_alpha=0.01", "model.moe.bias_update_speed=0.01",
         "train.global_batch_size=8", "train.micro_batch_size=2", "train.seq_length=16",
         "train.threads=1", "optimizer.lr=3e-3", "optimizer.warmup_steps=2",
         "data.synthetic.order=1", "log.interval=1000"]
# Tolerances (relative): the layouts sum the same float terms in other orders
# (all-reduces, experts' rows from several ranks), so step 1 differs by
# round-off only (~1e-9 measured); 20 steps of AdamW let it grow a little. A
# token sent to the wrong expert or a gradient summed over the wrong group
# changes the loss by far more.
# Exports: as tests/layouts/check_layouts.py, lr 3e-4 keeps AdamW's response
# to round-off in near-zero gradients below 1e-5; a wrong expert is off by ~0.1.
# BF16: another summation order can round an activation to the neighbouring
# bf16 value (2^-8 relative), and where two experts' scores are that close
# the router's choice flips, a whole expert's output for that token (measured:
# step-1 grad norm 1.7e-4 under tp 2, 20 steps 7.4e-4).
RTOL = {"FP32": (1e-5, 1e-4), "BF16": (1e-3, 3e-3)}
STEP1_RTOL, EXPORT_ATOL = RTOL["FP32"][0], 1e-5
PRECISIONS = ("FP32", "BF16")


def sets(steps, more):
    """The `--set`s of a run of `steps` steps: the model, then `more`."""
    return MODEL + [f"train.steps={steps}"] + more


def check_matches(check, name, got, ref, precision="FP32"):
    step1_rtol, curve_rtol = RTOL[precision]
    name = f"{name} {precision}"
    for field in ("loss", "grad_norm", "aux_loss", "moe_load_imbalance"):
        check(rel(got[0][field], ref[0][field]) <= step1_rtol,
              f"{name}: step-1 {field} {got[0][field]:.9g} vs {ref[0][field]:.9g}")
    worst = max(rel(g["loss"], r["loss"]) for g, r in zip(got, ref))
    check(len(got) == 20 and worst <= curve_rtol,
          f"{name}: 20-step loss curve, worst relative difference {worst:.2e}")


def in_precision(precision, more):
    """A layout's `--set`s in `precision`, 20 steps. The bf16 runs move tensors
    through the staged backend, which checks NCCL's rules (no tags, same
    collectives in the same order)."""
    staged = ["parallel.comm_backend=MPI"] if precision == "BF16" else []
    return sets(20, more + [f"train.precision={precision}"] + staged)


def reference_routes(ctx, precision):
    ref = ctx.baseline(f"ref.{precision.lower()}").metrics
    ctx.check(ref[-1]["moe_load_imbalance"] > 1 and ref[0]["aux_loss"] > 0,
              f"reference routes ({precision}): imbalance {ref[-1]['moe_load_imbalance']:.3f}, "
              f"aux loss {ref[0]['aux_loss']:.3g}")


def matches(ctx, name, ranks, layout, ref, precision):
    """`layout` on `ranks` ranks against the baseline `ref` (check_matches)."""
    got = train(ctx.tetra, ctx.fresh(name), ranks, layout)
    check_matches(ctx.check, name, got, ctx.baseline(ref).metrics, precision)


BASELINES, CASES = [], []
for precision in PRECISIONS:
    p = precision.lower()
    # Every layout against the single rank, both in `precision`.
    BASELINES.append(train_baseline(f"ref.{p}", in_precision(precision, [])))
    CASES.append(Case(f"{p}.reference_routes", 1, functools.partial(reference_routes, precision=precision),
                      (f"ref.{p}",), runs=0))
    layouts = [(f"dp4_ep{ep}_zero{zero}", 4, [f"parallel.expert={ep}", f"optimizer.zero_stage={zero}"])
               for ep in (2, 4) for zero in (0, 1)]
    layouts.append(("tp2_dp2_ep2", 4, ["parallel.tensor=2", "parallel.expert=2"]))
    for name, ranks, layout in layouts:
        CASES.append(Case(f"{p}.{name}", ranks, functools.partial(
            matches, name=name, ranks=ranks, layout=in_precision(precision, layout), ref=f"ref.{p}",
            precision=precision), (f"ref.{p}",)))

    shape = ["model.num_hidden_layers=4", "train.global_batch_size=32"]
    BASELINES.append(train_baseline(f"ref_pp.{p}", in_precision(precision, shape)))
    for tp, pp, dp, v in [(1, 2, 2, 1), (1, 2, 2, 2), (2, 2, 2, 1)]:
        name = f"tp{tp}_pp{pp}_dp{dp}_ep2_v{v}"
        layout = shape + [f"parallel.tensor={tp}", f"parallel.pipeline={pp}", "parallel.expert=2",
                          f"parallel.virtual_stages={v}"]
        CASES.append(Case(f"{p}.{name}", tp * pp * dp, functools.partial(
            matches, name=name, ranks=tp * pp * dp, layout=in_precision(precision, layout), ref=f"ref_pp.{p}",
            precision=precision), (f"ref_pp.{p}",)))


def bf16_is_used(ctx):
    check_bf16_is_used(ctx.check, ctx.baseline("ref.bf16").metrics, ctx.baseline("ref.fp32").metrics)


CASES.append(Case("bf16_is_used", 1, bf16_is_used, ("ref.bf16", "ref.fp32"), runs=0))

# Exports after 5 steps at lr 3e-4, and a run that imports the single rank's.
BASELINES.append(train_baseline("export_ref", sets(5, ["optimizer.lr=3e-4", "export_path={out}/weights"])))


def export_matches(ctx, name, layout):
    a = read_safetensors(f"{ctx.baseline('export_ref').path}/weights/model.safetensors")
    par_dir = ctx.fresh("export_" + name.replace(" ", ""))
    train(ctx.tetra, par_dir, 4, sets(5, ["optimizer.lr=3e-4", f"export_path={par_dir}/weights"] + layout))
    b = read_safetensors(f"{par_dir}/weights/model.safetensors")
    expert = "model.layers.1.mlp.experts.7.down_proj.weight"
    ctx.check(a.keys() == b.keys() and expert in b and
              "model.layers.1.mlp.gate.e_score_correction_bias" in b,
              f"{name} export names: {len(b)} tensors, the single rank's {len(a)}, {expert} among them")
    worst = max_abs_difference(a, b)
    ctx.check(worst <= EXPORT_ATOL, f"{name} export after 5 steps: max abs difference {worst:.2e}")


def import_matches(ctx):
    init = f"init_from={ctx.baseline('export_ref').path}/weights/model.safetensors"
    imported_ref = train(ctx.tetra, ctx.fresh("import_ref"), 1, sets(2, [init]))
    imported = train(ctx.tetra, ctx.fresh("import_ep4"), 4, sets(2, [init, "parallel.expert=4"]))
    ctx.check(rel(imported[0]["loss"], imported_ref[0]["loss"]) <= STEP1_RTOL,
              f"ep 4 import: step-1 loss {imported[0]['loss']:.9f} vs {imported_ref[0]['loss']:.9f}")


for case, name, layout in (("ep4", "ep 4", ["parallel.expert=4"]),
                           ("tp2_ep2", "tp 2 ep 2", ["parallel.tensor=2", "parallel.expert=2"])):
    CASES.append(Case(f"export.{case}", 4, functools.partial(export_matches, name=name, layout=layout),
                      ("export_ref",)))
CASES.append(Case("import.ep4", 4, import_matches, ("export_ref",), runs=2))

if __name__ == "__main__":
    main(__doc__, "moe", CASES, BASELINES, "all MoE layouts match the single-rank run")
