#!/usr/bin/env python3
"""DeepSeek-V3 (and GLM-4.5 MoE) model directories in and out, against `transformers`.

A check by hand, not run by CI: it needs transformers >= 4.57 (DeepseekV3ForCausalLM,
Glm4MoeForCausalLM) and torch, e.g. a venv with `pip install torch transformers==4.57.6`.

Cases (float32 throughout; vocab 64, hidden 32, 3 layers, 4 heads, layer 0 a dense
SwiGLU MLP of 48, layers 1-2 DeepSeek-V3 MoE: 8 routed experts of 16 in 2 groups,
top-1 group, top-2 experts, one shared expert, sigmoid scores with a random non-zero
e_score_correction_bias, norm_topk_prob, routed_scaling_factor 2.5):
  mla_q_lora, mla_no_q_lora: a random DeepseekV3ForCausalLM (multi-head latent
     attention, kv_lora_rank 16, qk_nope 8, qk_rope 4, v 8; q_lora_rank 16, or None:
     a plain q_proj) with YaRN (factor 4 over an original context of 16,
     max_position_embeddings 64, mscale = mscale_all_dim = 1, so the softmax scale
     is multiplied by mscale(4, 1)^2 and the second rotary frequency is divided by 4)
     and rope_interleave, saved with save_pretrained (the first sharded);
     1. tetra trains from the directory alone (no model section: it comes from
        config.json); its step-1 loss equals transformers' loss of the same
        weights on the same samples (1e-5 relative);
     2. tetra's export after one step loads in DeepseekV3ForCausalLM.from_pretrained
        with no missing, unexpected or mis-shaped tensor, computes with the same
        rotary frequencies and softmax scale, and its loss on the second step's
        samples equals tetra's step-2 loss (1e-5 relative).
  gqa_moe: the same MoE under grouped-query attention (4 query, 2 key-value heads of
     8, YaRN without mscale), as Glm4MoeForCausalLM computes it with
     partial_rotary_factor 1, use_qk_norm false and attention_bias false: exactly
     LlamaForCausalLM's attention with DeepseekV3MoE's MLP (checked here on the
     case's own weights). tetra trains from the directory alone, step 1 as
     above; its export must name Glm4MoeForCausalLM and match step 2 as above
     (a refusal to export is reported and skipped).
The MoE balance loss is not part of tetra's reported "loss": both sides compare
plain mean cross-entropy over all B x T target tokens. transformers' router masks
the experts of unchosen groups with a score of 0.0 (not -inf); every case checks
that all biased scores are positive, where that is the same as DeepSeek-V3's -inf.
Controls: dropping YaRN, rope_interleave or the correction bias changes
transformers' loss by far more than the tolerance, so the comparison can tell.

usage: hf_deepseek_v3_round_trip.py TETRA_BINARY
       hf_deepseek_v3_round_trip.py --hf-only   (transformers half only: build, save,
                                                 reload, print transformers' losses)
"""
import json
import os
import sys
import tempfile

import torch
import transformers
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "testing"))
from tetra_runs import Checker, rel, train, write_llmc_shard  # noqa: E402

if len(sys.argv) != 2:
    sys.exit(__doc__)
HF_ONLY = sys.argv[1] == "--hf-only"
TETRA = None if HF_ONLY else sys.argv[1]
SEQ, BATCH, VOCAB = 16, 4, 64
# fp32 on both sides; the sums run in other orders: round-off of ~1e-7. A wrong
# rotation, scale, norm, route or tensor is off by 1e-3 or more.
RTOL = 1e-5
# transformers' init (std 0.02) makes attention almost uniform and the logits
# almost constant, where RoPE, the routing and the correction bias hardly change
# the loss (measured: by about 1e-4 relative, too close to RTOL). Weights of std
# 0.1, 3x larger query and key weights and a 2x larger LM head make each of them
# count ~1e-3 or more.
INIT_STD = 0.1
QK_GAIN = 3.0
HEAD_GAIN = 2.0
# Any seed serves the comparisons; with this one each control below moves the
# loss by 1.9e-3 or more (some seeds leave one at a few 1e-4).
SEED = 2
# Below the smallest sigmoid score (about 0.1 at INIT_STD), so biased scores stay positive.
BIAS_RANGE = 0.05
YARN_MLA = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
            "mscale": 1.0, "mscale_all_dim": 1.0}
YARN_GQA = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}
MOE = dict(n_routed_experts=8, num_experts_per_tok=2, n_group=2, topk_group=1, n_shared_experts=1,
           moe_intermediate_size=16, first_k_dense_replace=1, routed_scaling_factor=2.5, norm_topk_prob=True)
COMMON = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
              max_position_embeddings=64, rope_theta=10000.0, tie_word_embeddings=False, initializer_range=INIT_STD)
check = Checker()


def hf_loss(model, samples):
    """Mean token cross-entropy of (B, T + 1) samples: inputs the first T, targets the last T.
    (The same as model(inputs, labels=inputs, shift_labels=targets).loss; labels=inputs
    alone would drop each sample's last position.)"""
    with torch.no_grad():
        logits = model(samples[:, :-1]).logits.float()
        return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), samples[:, 1:].reshape(-1)).item()


def routers(model):
    return [layer.mlp.gate for layer in model.model.layers if hasattr(layer.mlp, "gate")]


def routing_margins(model, samples):
    """Over every token of every MoE layer: the smallest biased score (transformers
    masks unchosen groups with 0.0, so it must be positive), and the smallest gaps
    that decide the routing (the chosen groups' last over the next group, the
    chosen experts' last over the next allowed expert): round-off can flip a route
    only where a gap is at round-off's size."""
    seen = []
    hooks = [gate.register_forward_hook(lambda gate, args, out: seen.append((gate, args[0])))
             for gate in routers(model)]
    with torch.no_grad():
        model(samples[:, :-1])
        for h in hooks:
            h.remove()
        low, group_gap, expert_gap = float("inf"), float("inf"), float("inf")
        for gate, x in seen:
            x = x.reshape(-1, x.shape[-1]).float()
            biased = torch.sigmoid(x @ gate.weight.float().T) + gate.e_score_correction_bias
            low = min(low, biased.min().item())
            n, e, g = biased.shape[0], biased.shape[1], gate.n_group
            group = biased.view(n, g, e // g).topk(2, dim=-1)[0].sum(-1).sort(-1, descending=True)[0]
            if gate.topk_group < g:
                group_gap = min(group_gap, (group[:, gate.topk_group - 1] - group[:, gate.topk_group]).min().item())
            group_scores = biased.view(n, g, e // g).topk(2, dim=-1)[0].sum(-1)
            chosen = torch.zeros_like(group_scores).scatter_(1, group_scores.topk(gate.topk_group, -1)[1], 1.0)
            allowed = biased.masked_fill(chosen.repeat_interleave(e // g, 1) == 0, float("-inf"))
            top = allowed.sort(-1, descending=True)[0]
            expert_gap = min(expert_gap, (top[:, gate.top_k - 1] - top[:, gate.top_k]).min().item())
    return low, group_gap, expert_gap


def check_routing(name, model, samples, what):
    low, group_gap, expert_gap = routing_margins(model, samples)
    check(low > 0, f"{name}: {what}: every biased expert score is positive (smallest {low:.4f}), so "
                   "transformers' 0.0 for unchosen groups cannot pick one of them")
    print(f"     {name}: {what}: smallest routing gaps: groups {group_gap:.2e}, experts {expert_gap:.2e}")


def randomize(model, attention):
    """Sharp attention, a random non-zero correction bias and norm weights away
    from 1, so that each of them counts in the loss."""
    with torch.no_grad():
        for layer in model.model.layers:
            a = layer.self_attn
            if attention == "mla":
                (a.q_b_proj if a.q_lora_rank is not None else a.q_proj).weight.mul_(QK_GAIN)
                a.kv_a_proj_with_mqa.weight[a.kv_lora_rank:].mul_(QK_GAIN)  # the shared rotary key
                per_head = a.qk_nope_head_dim + a.v_head_dim  # kv_b_proj rows: per head k_nope, then v
                a.kv_b_proj.weight.view(-1, per_head, a.kv_lora_rank)[:, :a.qk_nope_head_dim].mul_(QK_GAIN)
            else:
                a.q_proj.weight.mul_(QK_GAIN)
                a.k_proj.weight.mul_(QK_GAIN)
            for name, p in layer.named_parameters():
                if "layernorm" in name:
                    p.normal_(1.0, 0.1)
        for gate in routers(model):
            gate.e_score_correction_bias.uniform_(-BIAS_RANGE, BIAS_RANGE)
        model.model.norm.weight.normal_(1.0, 0.1)
        model.lm_head.weight.mul_(HEAD_GAIN)


def loaded_strictly(cls, path):
    """cls.from_pretrained(path) in float32, and what it could not match (from_pretrained
    only warns about missing, unexpected and mis-shaped tensors)."""
    model, info = cls.from_pretrained(path, torch_dtype=torch.float32, output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    return model.eval(), problems


def tetra_train(work, init_from, steps, sets, export=None):
    """tetra's per-step losses (a run that fails exits the script, as SystemExit)."""
    sets = [f"init_from={init_from}", "data.format=LLMC", f"data.path={work}/train.bin",
            f"train.seq_length={SEQ}", f"train.global_batch_size={BATCH}", f"train.micro_batch_size={BATCH}",
            f"train.steps={steps}", "train.precision=FP32", "train.threads=1",
            "optimizer.lr=1e-3", "optimizer.min_lr=1e-3"] + sets
    out = f"{work}/run_{os.path.basename(init_from)}_{steps}_{'export' if export else 'plain'}"
    os.makedirs(out, exist_ok=True)
    return [m["loss"] for m in train(TETRA, out, 1, sets + ([f"export_path={export}"] if export else []))]


def samples_and_shard(work):
    generator = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, VOCAB, (2 * BATCH * SEQ + 1,), generator=generator)
    write_llmc_shard(f"{work}/train.bin", tokens.tolist())
    # Sample i is tokens [i T, i T + T]; step s takes samples (s - 1) B .. s B - 1.
    return [torch.stack([tokens[i * SEQ:i * SEQ + SEQ + 1] for i in range(s * BATCH, (s + 1) * BATCH)])
            for s in range(2)]


def control(name, model, config_cls, model_cls, changes, reference, samples, what):
    """transformers' loss with `changes` to the config (same weights) differs by far more than RTOL."""
    other = model_cls(config_cls(**{**model.config.to_dict(), **changes})).eval()
    other.load_state_dict(model.state_dict())
    loss = hf_loss(other, samples)
    check(rel(loss, reference) > 100 * RTOL,
          f"{name}: {what} changes transformers' loss by {rel(loss, reference):.1e} relative (> 100 x tolerance)")


def bias_control(name, model, reference, samples):
    saved = [g.e_score_correction_bias.clone() for g in routers(model)]
    with torch.no_grad():
        for g in routers(model):
            g.e_score_correction_bias.zero_()
    loss = hf_loss(model, samples)
    with torch.no_grad():
        for g, b in zip(routers(model), saved):
            g.e_score_correction_bias.copy_(b)
    check(rel(loss, reference) > 100 * RTOL,
          f"{name}: zeroing e_score_correction_bias changes transformers' loss by {rel(loss, reference):.1e} "
          "relative (> 100 x tolerance)")


def save_and_reload(name, model, model_cls, model_dir, save_kwargs, samples):
    model.save_pretrained(model_dir, safe_serialization=True, **save_kwargs)
    print(f"{name}: transformers wrote {', '.join(sorted(os.listdir(model_dir)))}")
    reloaded, problems = loaded_strictly(model_cls, model_dir)
    check(not problems, f"{name}: the saved directory reloads in {model_cls.__name__} with every tensor matched "
                        f"{problems or ''}")
    losses = [hf_loss(reloaded, s) for s in samples]
    check(losses == [hf_loss(model, s) for s in samples],
          f"{name}: the reloaded model computes the saved one's losses exactly")
    return reloaded


def mla_case(name, work, q_lora_rank, save_kwargs):
    torch.manual_seed(SEED)
    config = transformers.DeepseekV3Config(
        **COMMON, **MOE, num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=q_lora_rank, qk_nope_head_dim=8,
        qk_rope_head_dim=4, v_head_dim=8, rope_scaling=dict(YARN_MLA), rope_interleave=True, rms_norm_eps=1e-6,
        attention_bias=False)
    model = transformers.DeepseekV3ForCausalLM(config).eval()
    randomize(model, "mla")
    samples = samples_and_shard(work)
    model_dir = f"{work}/{name}"
    model = save_and_reload(name, model, transformers.DeepseekV3ForCausalLM, model_dir, save_kwargs, samples)
    reference = hf_loss(model, samples[0])
    print(f"     {name}: transformers' loss on step 1's samples {reference:.9f}, "
          f"on step 2's (the initial weights) {hf_loss(model, samples[1]):.9f}")
    check_routing(name, model, samples[0], "step 1's samples")
    cfg_cls, model_cls = transformers.DeepseekV3Config, transformers.DeepseekV3ForCausalLM
    control(name, model, cfg_cls, model_cls, {"rope_scaling": None}, reference, samples[0], "dropping YaRN")
    control(name, model, cfg_cls, model_cls, {"rope_interleave": False}, reference, samples[0],
            "rope_interleave false")
    bias_control(name, model, reference, samples[0])
    if HF_ONLY:
        return

    # 1. Step-1 loss from the directory alone.
    export = f"{work}/{name}_export"
    one_step = tetra_train(work, model_dir, 1, [], export=export)
    two_steps = tetra_train(work, model_dir, 2, [])
    check(rel(one_step[0], reference) <= RTOL,
          f"{name}: tetra's step-1 loss from the directory {one_step[0]:.9f} vs transformers {reference:.9f}")
    check(two_steps[0] == one_step[0], f"{name}: the 2-step run's step 1 is the 1-step run's")

    # 2. tetra's export after one step, read back by transformers.
    exported, problems = loaded_strictly(transformers.DeepseekV3ForCausalLM, export)
    check(not problems, f"{name}: tetra's export loads in DeepseekV3ForCausalLM with every tensor matched "
                        f"{problems or ''}")
    got = exported.config
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                "rope_interleave", "max_position_embeddings", "rope_theta", "rms_norm_eps", "tie_word_embeddings",
                *MOE):
        check(getattr(got, key) == getattr(config, key),
              f"{name}: exported {key} {getattr(got, key)!r} (the model's: {getattr(config, key)!r})")
    mine, theirs = model.model, exported.model
    check(torch.equal(mine.rotary_emb.inv_freq, theirs.rotary_emb.inv_freq)
          and mine.rotary_emb.attention_scaling == theirs.rotary_emb.attention_scaling
          and mine.layers[0].self_attn.scaling == theirs.layers[0].self_attn.scaling,
          f"{name}: the export's YaRN gives the same rotary frequencies {theirs.rotary_emb.inv_freq.tolist()}, "
          f"cos/sin factor {theirs.rotary_emb.attention_scaling} and softmax scale "
          f"{theirs.layers[0].self_attn.scaling:.6f} (the model's: {mine.layers[0].self_attn.scaling:.6f})")
    check_routing(name, exported, samples[1], "the export on step 2's samples")
    after = hf_loss(exported, samples[1])
    check(rel(after, two_steps[1]) <= RTOL,
          f"{name}: transformers' loss of tetra's export {after:.9f} vs tetra's step-2 loss {two_steps[1]:.9f}")


def gqa_moe_case(name, work):
    torch.manual_seed(SEED)
    kv_heads, head_dim = 2, 8
    config = transformers.Glm4MoeConfig(
        **COMMON, **MOE, num_key_value_heads=kv_heads, head_dim=head_dim, partial_rotary_factor=1.0,
        use_qk_norm=False, attention_bias=False, rope_scaling=dict(YARN_GQA), rms_norm_eps=1e-5)
    model = transformers.Glm4MoeForCausalLM(config).eval()
    randomize(model, "gqa")
    samples = samples_and_shard(work)
    model_dir = f"{work}/{name}"
    model = save_and_reload(name, model, transformers.Glm4MoeForCausalLM, model_dir, {}, samples)
    reference = hf_loss(model, samples[0])
    print(f"     {name}: transformers' loss on step 1's samples {reference:.9f}, "
          f"on step 2's (the initial weights) {hf_loss(model, samples[1]):.9f}")
    check_routing(name, model, samples[0], "step 1's samples")
    bias_control(name, model, reference, samples[0])
    control(name, model, transformers.Glm4MoeConfig, transformers.Glm4MoeForCausalLM, {"rope_scaling": None},
            reference, samples[0], "dropping YaRN")

    # What Glm4MoeForCausalLM computes: LlamaForCausalLM's attention and DeepseekV3MoE.
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        **COMMON, num_key_value_heads=kv_heads, head_dim=head_dim, rope_scaling=dict(YARN_GQA),
        rms_norm_eps=1e-5, attention_bias=False)).eval()
    ds_moe = transformers.DeepseekV3Config(hidden_size=COMMON["hidden_size"], **MOE)
    for i in range(MOE["first_k_dense_replace"], COMMON["num_hidden_layers"]):
        llama.model.layers[i].mlp = DeepseekV3MoE(ds_moe)
    llama.load_state_dict(model.state_dict(), strict=True)
    with torch.no_grad():
        gap = (llama(samples[0][:, :-1]).logits - model(samples[0][:, :-1]).logits).abs().max().item()
    check(gap <= 1e-6, f"{name}: Glm4MoeForCausalLM's logits are LlamaForCausalLM attention + DeepseekV3MoE's "
                       f"(same tensor names) within {gap:.1e}")
    if HF_ONLY:
        return

    # 1. Step-1 loss from the directory alone (its config.json gives the model).
    weights = model_dir
    two_steps = tetra_train(work, weights, 2, [])
    check(rel(two_steps[0], reference) <= RTOL,
          f"{name}: tetra's step-1 loss from the directory {two_steps[0]:.9f} vs transformers {reference:.9f}")

    # 2. The export, if tetra writes one, as Glm4MoeForCausalLM.
    export = f"{work}/{name}_export"
    try:
        one_step = tetra_train(work, weights, 1, [], export=export)
    except SystemExit as refusal:  # run_tetra's exit: the command, then tetra's output
        said = [line for line in str(refusal).splitlines()[1:] if line.strip()][-6:]
        print(f"SKIP {name}: tetra refuses to export this GQA MoE model, so the Glm4MoeForCausalLM round trip is "
              "not checked; tetra said:\n     " + "\n     ".join(said))
        return
    check(one_step[0] == two_steps[0], f"{name}: the exporting run's step 1 is the 2-step run's")
    written = json.load(open(f"{export}/config.json"))
    check(written.get("architectures") == ["Glm4MoeForCausalLM"] and written.get("model_type") == "glm4_moe",
          f"{name}: tetra's export names {written.get('architectures')} / {written.get('model_type')!r} "
          "(Glm4MoeForCausalLM / 'glm4_moe' computes GQA with DeepSeek-V3's MoE; DeepseekV3ForCausalLM has "
          "only latent attention)")
    if written.get("model_type") != "glm4_moe":
        return
    exported, problems = loaded_strictly(transformers.Glm4MoeForCausalLM, export)
    check(not problems, f"{name}: tetra's export loads in Glm4MoeForCausalLM with every tensor matched "
                        f"{problems or ''}")
    got = exported.config
    for key in ("partial_rotary_factor", "use_qk_norm", "attention_bias", "num_key_value_heads", "head_dim",
                "max_position_embeddings", "rms_norm_eps", *MOE):
        check(getattr(got, key, None) == getattr(config, key),
              f"{name}: exported {key} {getattr(got, key, None)!r} (the model's: {getattr(config, key)!r})")
    check(torch.equal(model.model.rotary_emb.inv_freq, exported.model.rotary_emb.inv_freq)
          and model.model.rotary_emb.attention_scaling == exported.model.rotary_emb.attention_scaling,
          f"{name}: the export's YaRN gives the same rotary frequencies and cos/sin factor "
          f"{exported.model.rotary_emb.attention_scaling}")
    check_routing(name, exported, samples[1], "the export on step 2's samples")
    after = hf_loss(exported, samples[1])
    check(rel(after, two_steps[1]) <= RTOL,
          f"{name}: transformers' loss of tetra's export {after:.9f} vs tetra's step-2 loss {two_steps[1]:.9f}")


print(f"torch {torch.__version__}, transformers {transformers.__version__}"
      + (": the transformers half only" if HF_ONLY else ""))
transformers.logging.set_verbosity_error()  # missing and unexpected tensors are checked, not warned
transformers.logging.disable_progress_bar()
with tempfile.TemporaryDirectory() as tmp:
    for name in ("mla_q_lora", "mla_no_q_lora", "gqa_moe"):
        work = f"{tmp}/{name}"  # each case its own shard and runs
        os.makedirs(work)
        if name == "mla_q_lora":
            mla_case(name, work, 16, {"max_shard_size": "20KB"})
        elif name == "mla_no_q_lora":
            mla_case(name, work, None, {})
        else:
            gqa_moe_case(name, work)

check.exit("DeepSeek-V3 directories: transformers' half as expected" if HF_ONLY else
           "DeepSeek-V3 directories train and export as transformers computes them")
