#!/usr/bin/python3
"""Layout equivalence: every (tensor, pipeline, data) layout trains like the single rank.

Runs the same tiny Llama (GQA, untied head) with the
same seed and synthetic data on one rank and under `mpirun` for each layout,
ZeRO-1 and sequence parallelism off and on, and checks (docs/architecture.md principle 2):
  - step-1 loss and gradient norm within 1e-5 relative of the single rank,
  - the loss at every one of 20 steps within 1e-4 relative,
  - weights exported after 5 steps under (tp 2, dp 2), under (tp 2, pp 2)
    and, with tied embeddings, under pp 2 interleaved equal the single-rank
    export to 1e-5,
  - validation losses (llm.c shards, every 2 steps) under tp 2 x pp 2
    interleaved, under pp 2 x dp 2 and under dp 4 (micro-batches split over
    dp) equal the single rank's to 1e-5,
  - ZeRO-1 with dp 4 holds a quarter (within padding) of the optimizer state,
  - num_key_value_heads 2 with tp 4 (replicated KV heads) matches too,
  - a vocabulary no tensor size divides (61, padded to 128 x tp rows inside)
    under tp 2 and tp 4: step 1 within 1e-5, 20 steps within 1e-4, and the
    tp 2 export after 5 steps equals the single rank's, with 61-row
    embedding and LM head tensors,
  - pipeline 2 and 4 under 1F1B and GPipe, pipeline 2 interleaved with 2
    virtual stages, and tp 2 x pp 2 x dp 2 under all three, with a 4-layer
    model and 8 micro-batches per step, and tied embeddings split over the
    first and last stage (pp 2, plain and interleaved): step-1 loss and
    gradient norm within 1e-5 relative, and every one of 20 steps within 1e-4;
  - every layout of the last three items again with train.precision BF16
    (bf16 weights' compute copies and activations, also across the TP, SP
    and PP communication) against the single-rank bf16 run, within 1e-4 at
    step 1 and 1e-3 over 20 steps; and the single-rank bf16 run differs from
    the fp32 one by bf16 round-off: not at all would mean bf16 is not used.
    The bf16 runs move tensors through the staged backend (parallel.comm_backend
    MPI), which checks NCCL's rules: no tags (pipeline messages matched in
    posting order), the same collectives in the same order on every rank.
usage: check_layouts.py TETRA_BINARY [--list] [--case NAME[,NAME...]] [--work-dir DIR]
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
from tetra_runs import (check_bf16_is_used, max_abs_difference, read_safetensors, rel, train,  # noqa: E402
                        write_llmc_shard)

MODEL = ["model.vocab_size=64", "model.hidden_size=32", "model.num_hidden_layers=2",
         "model.num_attention_heads=4", "model.num_key_value_heads=2",
         "model.intermediate_size=64", "train.global_batch_size=8", "train.micro_batch_size=2",
         "train.seq_length=16", "train.threads=1", "optimizer.lr=3e-3", "optimizer.warmup_steps=2",
         "data.synthetic.order=1", "log.interval=1000"]
# Tolerances (relative), step 1 and the 20-step curve, by train.precision.
# FP32: the layouts sum the same float terms in other orders (split GEMMs,
# all-reduces), so step 1 differs by round-off only (~1e-7); 20 steps of
# AdamW let that round-off grow a little. BF16: another summation order can
# round an activation to the neighbouring bf16 value (2^-8 relative), which
# the loss averages over thousands of elements (measured: step 1 <= 2e-5,
# 20 steps <= 1.4e-4).
RTOL = {"FP32": (1e-5, 1e-4), "BF16": (1e-4, 1e-3)}
STEP1_RTOL, EXPORT_ATOL = RTOL["FP32"][0], 1e-5
PRECISIONS = ("FP32", "BF16")


def sets(steps, more):
    """The `--set`s of a run of `steps` steps: the model, then `more`."""
    return MODEL + [f"train.steps={steps}"] + more


def check_matches(check, name, got, ref, precision="FP32"):
    """Step-1 loss and grad norm, and the 20-step curve, within RTOL[precision]."""
    step1_rtol, curve_rtol = RTOL[precision]
    name = f"{name} {precision}"
    check(rel(got[0]["loss"], ref[0]["loss"]) <= step1_rtol,
          f"{name}: step-1 loss {got[0]['loss']:.9f} vs {ref[0]['loss']:.9f}")
    check(rel(got[0]["grad_norm"], ref[0]["grad_norm"]) <= step1_rtol,
          f"{name}: step-1 grad norm {got[0]['grad_norm']:.9f} vs {ref[0]['grad_norm']:.9f}")
    worst = max(rel(g["loss"], r["loss"]) for g, r in zip(got, ref))
    check(len(got) == 20 and worst <= curve_rtol,
          f"{name}: 20-step loss curve, worst relative difference {worst:.2e}")


def in_precision(precision, more):
    """A layout's `--set`s in `precision`, 20 steps. The bf16 runs move tensors
    through the staged backend, which checks NCCL's rules (no tags, same
    collectives in the same order)."""
    staged = ["parallel.comm_backend=MPI"] if precision == "BF16" else []
    return sets(20, more + [f"train.precision={precision}"] + staged)


def matches(ctx, name, ranks, layout, ref, precision):
    """`layout` on `ranks` ranks against the baseline `ref` (check_matches)."""
    got = train(ctx.tetra, ctx.fresh(name), ranks, layout)
    check_matches(ctx.check, name, got, ctx.baseline(ref).metrics, precision)


def curve_case(case, name, ranks, layout, ref, precision="FP32"):
    """The case `case`: `layout` (all its `--set`s) on `ranks` ranks, 20 steps, against `ref`."""
    return Case(case, ranks, functools.partial(matches, name=name, ranks=ranks, layout=layout, ref=ref,
                                               precision=precision), (ref,))


BASELINES, CASES = [], []
for precision in PRECISIONS:
    p = precision.lower()
    # Every layout against the single rank, both in `precision`.
    BASELINES.append(train_baseline(f"ref.{p}", in_precision(precision, [])))
    for tp, dp in [(2, 1), (4, 1), (1, 2), (1, 4), (2, 2)]:
        for zero in (0, 1):
            for sp in ((False, True) if tp > 1 else (False,)):
                if zero and dp == 1:
                    continue  # ZeRO-1 shards over data-parallel ranks
                name = f"tp{tp}_dp{dp}_zero{zero}_sp{int(sp)}"
                CASES.append(curve_case(f"{p}.{name}", name, tp * dp, in_precision(
                    precision, [f"parallel.tensor={tp}", f"optimizer.zero_stage={zero}",
                                f"parallel.sequence_parallel={'true' if sp else 'false'}"]), f"ref.{p}", precision))

    # Pipeline layouts: 4 layers (a multiple of pp), 8 micro-batches of 2
    # samples per data-parallel rank and step; each global batch size has
    # its own single-rank run.
    for dp in (1, 2):
        shape = ["model.num_hidden_layers=4", f"train.global_batch_size={16 * dp}"]
        BASELINES.append(train_baseline(f"ref_pp_dp{dp}.{p}", in_precision(precision, shape)))
    for tp, pp, dp in [(1, 2, 1), (1, 4, 1), (2, 2, 2)]:
        shape = ["model.num_hidden_layers=4", f"train.global_batch_size={16 * dp}"]
        schedules = [("ONE_F_ONE_B", 1), ("GPIPE", 1)] + ([("ONE_F_ONE_B", 2)] if pp == 2 else [])
        for schedule, v in schedules:
            name = f"tp{tp}_pp{pp}_dp{dp}_{schedule}_v{v}"
            layout = shape + [f"parallel.tensor={tp}", f"parallel.pipeline={pp}", f"parallel.schedule={schedule}",
                              f"parallel.virtual_stages={v}"]
            CASES.append(curve_case(f"{p}.{name}", name, tp * pp * dp, in_precision(precision, layout),
                                    f"ref_pp_dp{dp}.{p}", precision))

    # Tied embeddings: the first stage's table and the last stage's copy
    # for the LM head sum their gradients over the embedding group.
    tied = ["model.num_hidden_layers=4", "train.global_batch_size=16", "model.tie_word_embeddings=true"]
    BASELINES.append(train_baseline(f"ref_tied.{p}", in_precision(precision, tied)))
    for v in (1, 2):
        name = f"pp2_tied_v{v}"
        CASES.append(curve_case(f"{p}.{name}", name, 2, in_precision(
            precision, tied + ["parallel.pipeline=2", f"parallel.virtual_stages={v}"]), f"ref_tied.{p}", precision))


def bf16_is_used(ctx):
    check_bf16_is_used(ctx.check, ctx.baseline("ref.bf16").metrics, ctx.baseline("ref.fp32").metrics)


CASES.append(Case("bf16_is_used", 1, bf16_is_used, ("ref.bf16", "ref.fp32"), runs=0))


def zero1_optimizer_bytes(ctx):
    """Optimizer state under ZeRO-1 with dp 4: a quarter of the replicated one."""
    replicated = train(ctx.tetra, ctx.fresh("bytes_zero0"), 4, sets(2, ["optimizer.zero_stage=0"]))[0]
    sharded = train(ctx.tetra, ctx.fresh("bytes_zero1"), 4, sets(2, ["optimizer.zero_stage=1"]))[0]
    replicated, sharded = replicated["optimizer_bytes"], sharded["optimizer_bytes"]
    ctx.check(abs(sharded - replicated / 4) <= 8 * 16 * 4,
              f"ZeRO-1 dp 4 optimizer bytes {sharded:.0f} = replicated {replicated:.0f} / 4 (within padding)")


CASES.append(Case("zero1_optimizer_bytes", 4, zero1_optimizer_bytes, runs=2))

# Validation losses: llm.c shards in the baseline's directory, every 2 steps.
EVALUATED = ["model.num_hidden_layers=4", "train.global_batch_size=16", "data.format=LLMC",
             "data.path={out}/train.bin", "data.valid_path={out}/valid.bin",
             "log.eval_interval=2", "log.eval_batches=3"]


def write_shards(out):
    rng = random.Random(7)
    for name, count in (("train.bin", 20000), ("valid.bin", 4000)):
        write_llmc_shard(f"{out}/{name}", [rng.randrange(64) for _ in range(count)])


BASELINES.append(train_baseline("eval_ref", sets(4, EVALUATED), prepare=write_shards))


def validation_matches(ctx, name, layout):
    ref = ctx.baseline("eval_ref")
    evaluated = [s.replace("{out}", ref.path) for s in EVALUATED]
    val_ref = [m["val_loss"] for m in ref.metrics if "val_loss" in m]
    val_got = [m["val_loss"] for m in train(ctx.tetra, ctx.fresh(f"eval_{name}"), 4, sets(4, evaluated + layout))
               if "val_loss" in m]
    worst = max(rel(g, r) for g, r in zip(val_got, val_ref)) if len(val_got) == len(val_ref) == 2 else float("inf")
    ctx.check(worst <= STEP1_RTOL, f"validation loss under {name}: worst relative difference {worst:.2e}")


for name, layout in (("tp2_pp2_v2", ["parallel.tensor=2", "parallel.pipeline=2", "parallel.virtual_stages=2"]),
                     ("pp2_dp2", ["parallel.pipeline=2"]), ("dp4", [])):
    CASES.append(Case(f"eval.{name}", 4, functools.partial(validation_matches, name=name, layout=layout),
                      ("eval_ref",)))

# Exports after 5 steps: (tp 2, dp 2) equals the single rank. AdamW moves
# an element by about lr x m / sqrt(v) whatever its gradient's size, so
# where a gradient is near zero the layouts' round-off changes the step by
# a fraction of lr (measured: 1.7e-5 at lr 3e-3, 1.7e-6 at lr 3e-4,
# linear in lr). lr 3e-4 keeps that below the 1e-5 bound; a gather or
# slicing bug would be off by a whole weight (~0.02).
EXPORTED = ["optimizer.lr=3e-4", "export_path={out}/weights"]
FOUR_LAYERS = ["model.num_hidden_layers=4", "train.global_batch_size=16"]
ODD_VOCAB = ["model.vocab_size=61"]
EXPORT_SHAPES = {"export_ref": [], "export_ref.vocab61": ODD_VOCAB, "export_ref.four_layers": FOUR_LAYERS,
                 "export_ref.four_layers_tied": FOUR_LAYERS + ["model.tie_word_embeddings=true"]}
BASELINES += [train_baseline(ref, sets(5, shape + EXPORTED)) for ref, shape in EXPORT_SHAPES.items()]


def export_matches(ctx, name, ranks, layout, ref):
    """The export after 5 steps of `layout` equals the baseline `ref`'s; returns it."""
    par_dir = ctx.fresh(f"export_{name}")
    exported = [s.replace("{out}", par_dir) for s in EXPORTED]
    train(ctx.tetra, par_dir, ranks, sets(5, EXPORT_SHAPES[ref] + layout + exported))
    got = read_safetensors(f"{par_dir}/weights/model.safetensors")
    worst = max_abs_difference(read_safetensors(f"{ctx.baseline(ref).path}/weights/model.safetensors"), got)
    ctx.check(worst <= EXPORT_ATOL, f"export after 5 steps under {name}: max abs difference {worst:.2e}")
    return got


def vocab61_export_matches(ctx):
    """The tp 2 export of the 61-token vocabulary, with 61-row embedding and LM head tensors."""
    exported = export_matches(ctx, "vocab61_tp2", 2, ["parallel.tensor=2"], "export_ref.vocab61")
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        shape = exported[name][1]
        ctx.check(shape == [61, 32], f"vocab 61 export: {name} of shape {shape}, want [61, 32]")


def export_case(name, ranks, layout, ref):
    """The case export.`name`: the export of `layout` on `ranks` ranks against the baseline `ref`."""
    return Case(f"export.{name}", ranks, functools.partial(export_matches, name=name, ranks=ranks, layout=layout,
                                                           ref=ref), (ref,))


CASES.append(export_case("tp2_dp2", 4, ["parallel.tensor=2"], "export_ref"))
# A vocabulary no tensor size divides (61, padded to 128 x tp rows inside).
BASELINES.append(train_baseline("ref_vocab61", sets(20, ODD_VOCAB)))
for tp in (2, 4):
    CASES.append(curve_case(f"vocab61.tp{tp}", f"vocab61_tp{tp}", tp, sets(20, ODD_VOCAB + [f"parallel.tensor={tp}"]),
                            "ref_vocab61"))
CASES.append(Case("export.vocab61_tp2", 2, vocab61_export_matches, ("export_ref.vocab61",)))
CASES.append(export_case("tp2_pp2", 4, ["parallel.tensor=2", "parallel.pipeline=2"], "export_ref.four_layers"))
CASES.append(export_case("pp2_v2_tied", 2, ["parallel.pipeline=2", "parallel.virtual_stages=2"],
                         "export_ref.four_layers_tied"))

if __name__ == "__main__":
    main(__doc__, "dense", CASES, BASELINES, "all layouts match the single-rank run")
