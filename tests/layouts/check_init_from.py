#!/usr/bin/python3
"""init_from under every layout: each rank loads what it holds of the whole file.

Writes weights with `tetra export` under another seed (so they differ from
what a run would draw), then starts a single-rank run and one run per layout
from them, and checks:
  - the single rank's step-1 loss differs from a run without init_from (the
    weights were loaded, not drawn), and
  - each layout's step-1 loss and gradient norm are within 1e-5 relative of
    the single rank's: pipeline 2 and 4, tensor 2 x pipeline 2, pipeline 2
    interleaved (2 virtual stages), tied embeddings under pipeline 2 (plain
    and interleaved), MoE pipeline 2 x data 2 with expert 2, and the 4D
    tensor 2 x pipeline 2 x data 2 with expert 2 on 8 ranks.
Every run names the export's directory: its config.json gives the model
section, which the recipe's fields must agree with.
usage: check_init_from.py TETRA_BINARY [--list] [--case NAME[,NAME...]] [--work-dir DIR]
Each comparison above is a named case of CASES (--list prints them); the
exported weights with the single-rank run that starts from them, and the
run without init_from, are BASELINES, computed once and cached
(tests/testing/case_table.py).
"""
import functools
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "testing"))
from case_table import Baseline, Case, main, train_baseline  # noqa: E402
from tetra_runs import rel, run_tetra, train  # noqa: E402

DENSE = ["model.vocab_size=64", "model.hidden_size=32", "model.num_hidden_layers=4",
         "model.num_attention_heads=4", "model.num_key_value_heads=2", "model.intermediate_size=64",
         "train.global_batch_size=16", "train.micro_batch_size=2", "train.seq_length=16",
         "train.threads=1", "data.synthetic.order=1", "log.interval=1000"]
MOE = DENSE + ["model.moe.n_routed_experts=8", "model.moe.num_experts_per_tok=2",
               "model.moe.n_shared_experts=1", "model.moe.moe_intermediate_size=16",
               "model.moe.first_k_dense_replace=1", "model.moe.n_group=2", "model.moe.topk_group=1"]
MLA_MOE_MTP = MOE + ["model.kv_lora_rank=6", "model.q_lora_rank=8", "model.qk_nope_head_dim=4",
                     "model.qk_rope_head_dim=4", "model.v_head_dim=6", "model.num_nextn_predict_layers=1"]
# The layouts sum the same terms in other orders: round-off only (~1e-7). A
# tensor loaded into the wrong stage, slice or expert changes the loss by far
# more than this.
STEP1_RTOL = 1e-5
MODELS = {  # model name: model, layouts (name, ranks, sets)
    "dense": (DENSE, [("pp2", 2, ["parallel.pipeline=2"]),
                      ("pp4", 4, ["parallel.pipeline=4"]),
                      ("tp2_pp2", 4, ["parallel.tensor=2", "parallel.pipeline=2"]),
                      ("pp2_v2", 2, ["parallel.pipeline=2", "parallel.virtual_stages=2"])]),
    "tied": (DENSE + ["model.tie_word_embeddings=true"],
             [("pp2", 2, ["parallel.pipeline=2"]),
              ("pp2_v2", 2, ["parallel.pipeline=2", "parallel.virtual_stages=2"])]),
    "moe": (MOE, [("pp2_dp2_ep2", 4, ["parallel.pipeline=2", "parallel.expert=2"]),
                  ("tp2_pp2_dp2_ep2", 8, ["parallel.tensor=2", "parallel.pipeline=2", "parallel.expert=2"])]),
    "mla_moe_mtp": (MLA_MOE_MTP, [("tp2", 2, ["parallel.tensor=2"]),
                                  ("pp2", 2, ["parallel.pipeline=2"]),
                                  ("pp2_v2", 2, ["parallel.pipeline=2", "parallel.virtual_stages=2"]),
                                  ("dp2_zero1", 2, ["optimizer.zero_stage=1"]),
                                  ("dp2_ep2", 2, ["parallel.expert=2"]),
                                  ("tp2_pp2_dp2_ep2", 8, ["parallel.tensor=2", "parallel.pipeline=2",
                                                          "parallel.expert=2"])]),
}


def export(tetra, out, model):
    cmd = [tetra, "export", "--config", "/dev/null", "--out", out]
    for s in model + ["train.seed=99"]:
        cmd += ["--set", s]
    run_tetra(cmd)


def start(model, weights):
    """A 1-step run of `model` from the weights in the directory `weights`."""
    return model + ["train.steps=1", f"init_from={weights}"]


def exported_and_loaded(model_name):
    """The baseline `model_name`.ref: weights exported under another seed
    into weights/, and the single-rank run that starts from them."""
    model = MODELS[model_name][0]

    def produce(tetra, out):
        weights = os.path.join(out, "weights")
        os.makedirs(weights)
        export(tetra, weights, model)
        train(tetra, out, 1, start(model, weights))

    return Baseline(f"{model_name}.ref", produce, ("tetra export", *model, "train.seed=99", "tetra train",
                                                   *start(model, "{out}/weights")), runs=2)


def loads_weights(ctx, model_name):
    drawn, ref = ctx.baseline(f"{model_name}.drawn").metrics[0], ctx.baseline(f"{model_name}.ref").metrics[0]
    ctx.check(rel(ref["loss"], drawn["loss"]) > 10 * STEP1_RTOL,
              f"{model_name}: init_from changes the step-1 loss ({ref['loss']:.6f} vs drawn {drawn['loss']:.6f})")


def matches(ctx, model_name, name, ranks, sets):
    baseline = ctx.baseline(f"{model_name}.ref")
    ref = baseline.metrics[0]
    model = MODELS[model_name][0]
    got = train(ctx.tetra, ctx.fresh(f"{model_name}_{name}"), ranks,
                start(model, os.path.join(baseline.path, "weights")) + sets)[0]
    for field in ("loss", "grad_norm") + (("mtp_loss",) if "mtp" in model_name else ()):
        ctx.check(rel(got[field], ref[field]) <= STEP1_RTOL,
                  f"{model_name} {name}: step-1 {field} {got[field]:.9g} vs single rank {ref[field]:.9g}")


BASELINES, CASES = [], []
for model_name, (model, layouts) in MODELS.items():
    BASELINES += [train_baseline(f"{model_name}.drawn", model + ["train.steps=1"]), exported_and_loaded(model_name)]
    CASES.append(Case(f"{model_name}.loads_weights", 1, functools.partial(loads_weights, model_name=model_name),
                      (f"{model_name}.drawn", f"{model_name}.ref"), runs=0))
    CASES += [Case(f"{model_name}.{name}", ranks, functools.partial(matches, model_name=model_name, name=name,
                                                                    ranks=ranks, sets=sets), (f"{model_name}.ref",))
              for name, ranks, sets in layouts]

if __name__ == "__main__":
    main(__doc__, "init_from", CASES, BASELINES, "init_from loads the same model under every layout")
