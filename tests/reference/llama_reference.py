#!/usr/bin/python3
"""Independent PyTorch reference of LlamaForCausalLM training, to check tetra.

Written from Hugging Face's LlamaForCausalLM math (no `transformers` import)
and docs/architecture.md's "Numerics of one step"; optionally with DeepSeek-V3's parts as
transformers (>= 4.51) and the DeepSeek-V3 report define them: multi-head latent
attention (--kv-lora-rank), mixture of experts with a sigmoid, group-limited,
bias-corrected router (--moe-experts), YaRN rope scaling (--yarn-factor) and
multi-token prediction (--mtp-depth). One run writes, into --out DIR:

  init.safetensors  initial weights, HF names, F32 (written by hand here, not
                    by tetra's writer)
  train.bin         an llm.c shard (magic 20240520, uint16 tokens) of
                    steps * global_batch * seq + 1 tokens from a sparse random
                    bigram chain, so the loss has something to learn
  reference.json    {"loss": [...], "grad_norm": [...], "lr": [...]}, one entry
                    per optimizer step (grad_norm before clipping); with MoE
                    also "aux_loss", "moe_load_imbalance" and "router_margin",
                    with MTP "mtp_loss"
  tetra.textproto   the same run as a tetra TrainerConfig; tetra writes its
                    metrics to DIR/metrics.jsonl for compare_losses.py

`--self-test` instead checks this file's own model and training step against
alternative formulations (see SelfTest below) and exits non-zero on failure.
"""

import argparse
import bisect
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

LLMC_MAGIC = 20240520
LLMC_VERSION = 1
LLMC_HEADER_INTS = 256
INIT_STD = 0.02
# The data stream comes from its own generator, so changing the model size
# does not change the tokens.
DATA_SEED_OFFSET = 1_000_003
# DeepseekV3Attention builds q_a_layernorm and kv_a_layernorm with DeepseekV3RMSNorm's
# default eps, not config.rms_norm_eps.
MLA_LATENT_NORM_EPS = 1e-6
# DeepseekV3TopkRouter's guard when it renormalises the chosen experts' weights.
ROUTER_NORM_EPS = 1e-20
# The correction bias of each MoE layer's router: a buffer, not a trained parameter.
BIAS_SUFFIX = "mlp.gate.e_score_correction_bias"


# ----------------------------------------------------------------------------
# Model: parameters live in a dict of leaf tensors keyed by HF names.

def state_shapes(a):
    """(name, shape) of every tensor of the model, the router biases included, in HF
    order: the main model as LlamaForCausalLM / DeepseekV3ForCausalLM, then the MTP
    modules (model.layers.{L + k - 1}) as DeepSeek-V3's checkpoints name them."""
    shapes = [("model.embed_tokens.weight", (a.vocab, a.hidden))]
    for i in range(a.layers):
        shapes += block_shapes(a, i)
    shapes.append(("model.norm.weight", (a.hidden,)))
    if not a.tie:
        shapes.append(("lm_head.weight", (a.vocab, a.hidden)))
    for k in range(1, a.mtp_depth + 1):
        m = a.layers + k - 1
        p = f"model.layers.{m}."
        shapes += [(p + "enorm.weight", (a.hidden,)),
                   (p + "hnorm.weight", (a.hidden,)),
                   (p + "eh_proj.weight", (a.hidden, 2 * a.hidden))]
        shapes += block_shapes(a, m)
        shapes.append((p + "shared_head.norm.weight", (a.hidden,)))
    return shapes


def block_shapes(a, i):
    """One decoder layer's tensors: attention (GQA or MLA), then a dense or MoE MLP."""
    head_dim = a.hidden // a.heads
    p = f"model.layers.{i}."
    shapes = [
        (p + "input_layernorm.weight", (a.hidden,)),
    ]
    shapes += mla_param_shapes(a, p + "self_attn.") if is_mla(a) else [
        (p + "self_attn.q_proj.weight", (a.heads * head_dim, a.hidden)),
        (p + "self_attn.k_proj.weight", (a.kv_heads * head_dim, a.hidden)),
        (p + "self_attn.v_proj.weight", (a.kv_heads * head_dim, a.hidden)),
        (p + "self_attn.o_proj.weight", (a.hidden, a.heads * head_dim)),
    ]
    shapes.append((p + "post_attention_layernorm.weight", (a.hidden,)))
    if not is_moe_layer(a, i):
        return shapes + mlp_shapes(a, p + "mlp.", a.intermediate)
    # DeepseekV3MoE's module order: experts, gate (weight, bias buffer), shared_experts.
    for j in range(a.moe_experts):
        shapes += mlp_shapes(a, p + f"mlp.experts.{j}.", a.moe_intermediate)
    shapes += [(p + "mlp.gate.weight", (a.moe_experts, a.hidden)),
               (p + BIAS_SUFFIX, (a.moe_experts,))]
    if a.moe_shared > 0:
        shapes += mlp_shapes(a, p + "mlp.shared_experts.", a.moe_shared * a.moe_intermediate)
    return shapes


def mlp_shapes(a, p, intermediate):
    return [(p + "gate_proj.weight", (intermediate, a.hidden)),
            (p + "up_proj.weight", (intermediate, a.hidden)),
            (p + "down_proj.weight", (a.hidden, intermediate))]


def is_buffer(name):
    return name.endswith(BIAS_SUFFIX)


def param_shapes(a):
    """(name, shape) for every trained parameter (not the router biases), in HF order."""
    return [(n, s) for n, s in state_shapes(a) if not is_buffer(n)]


def is_mla(a):
    return a.kv_lora_rank > 0


def is_moe_layer(a, i):
    """DeepseekV3DecoderLayer: layer i (MTP blocks included) has a MoE MLP when i >=
    first_k_dense_replace."""
    return a.moe_experts > 0 and i >= a.first_k_dense


def uses_yarn(a):
    return a.yarn_factor > 0


def mla_param_shapes(a, p):
    """DeepseekV3Attention's weights (attention_bias false), in its module order."""
    qk_dim = a.qk_nope_dim + a.qk_rope_dim
    if a.q_lora_rank > 0:
        shapes = [(p + "q_a_proj.weight", (a.q_lora_rank, a.hidden)),
                  (p + "q_a_layernorm.weight", (a.q_lora_rank,)),
                  (p + "q_b_proj.weight", (a.heads * qk_dim, a.q_lora_rank))]
    else:
        shapes = [(p + "q_proj.weight", (a.heads * qk_dim, a.hidden))]
    return shapes + [
        (p + "kv_a_proj_with_mqa.weight", (a.kv_lora_rank + a.qk_rope_dim, a.hidden)),
        (p + "kv_a_layernorm.weight", (a.kv_lora_rank,)),
        (p + "kv_b_proj.weight", (a.heads * (a.qk_nope_dim + a.v_head_dim), a.kv_lora_rank)),
        (p + "o_proj.weight", (a.hidden, a.heads * a.v_head_dim)),
    ]


def init_state(a):
    """fp32 weights from torch's RNG: matrices N(0, 0.02^2) (experts, routers and
    eh_proj too), norm weights 1, router correction biases 0."""
    gen = torch.Generator().manual_seed(a.seed)
    state = {}
    for name, shape in state_shapes(a):
        if is_buffer(name):
            state[name] = torch.zeros(shape, dtype=torch.float32)
        elif len(shape) == 1:
            state[name] = torch.ones(shape, dtype=torch.float32)
        else:
            state[name] = torch.empty(shape, dtype=torch.float32).normal_(0.0, INIT_STD,
                                                                          generator=gen)
    return state


def init_params(a):
    """The trained parameters of init_state(a)."""
    return {n: t for n, t in init_state(a).items() if not is_buffer(n)}


def init_buffers(a, dtype=torch.float32):
    """The router correction biases of init_state(a) (zeros), by name."""
    return {n: torch.zeros(s, dtype=dtype) for n, s in state_shapes(a) if is_buffer(n)}


def output_weight(params, a):
    return params["model.embed_tokens.weight"] if a.tie else params["lm_head.weight"]


def rms_norm(x, weight, eps):
    """HF LlamaRMSNorm: normalise in (at least) fp32, then scale by the weight."""
    wide = x.to(torch.promote_types(x.dtype, torch.float32))
    wide = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + eps)
    return weight * wide.to(x.dtype)


def rope_cos_sin(seq, head_dim, theta, dtype, yarn=None):
    """(T, D) cos and sin of HF's rotate-half RoPE at positions 0..T-1; with `yarn`
    (the run's args) YaRN's frequencies, cos and sin times its attention factor."""
    if yarn is None:
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=dtype) / head_dim))
    else:
        inv_freq, attention_factor = yarn_inv_freq(head_dim, theta, yarn, dtype)
    freqs = torch.outer(torch.arange(seq, dtype=dtype), inv_freq)  # (T, D/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (T, D)
    if yarn is None:
        return emb.cos(), emb.sin()
    return emb.cos() * attention_factor, emb.sin() * attention_factor


def yarn_get_mscale(scale, mscale=1.0):
    """transformers' get_mscale / DeepSeek's yarn_get_mscale: 0.1 m ln(s) + 1, 1 for s <= 1."""
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def yarn_attention_factor(a):
    """_compute_yarn_parameters' attention_factor (cos and sin are multiplied by it)."""
    factor = yarn_max_positions(a) / a.yarn_original_max_pos
    if a.yarn_mscale and a.yarn_mscale_all_dim:
        return float(yarn_get_mscale(factor, a.yarn_mscale) /
                     yarn_get_mscale(factor, a.yarn_mscale_all_dim))
    return yarn_get_mscale(factor)


def yarn_max_positions(a):
    """max_position_embeddings = factor * original_max_position_embeddings."""
    return int(round(a.yarn_factor * a.yarn_original_max_pos))


def yarn_inv_freq(dim, base, a, dtype):
    """transformers' _compute_yarn_parameters (truncate true): (D/2,) inv_freq and the
    attention factor. Like DeepSeek-V3's config (original_max_position_embeddings set),
    the factor is max_position_embeddings / original_max_position_embeddings."""
    original = a.yarn_original_max_pos
    factor = yarn_max_positions(a) / original

    def correction_dim(rotations):
        # The dim index whose frequency turns `rotations` times over the original context.
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(correction_dim(a.yarn_beta_fast)), 0)
    high = min(math.ceil(correction_dim(a.yarn_beta_slow)), dim - 1)
    if low == high:
        high += 0.001  # transformers' guard against a zero-width ramp
    ramp = ((torch.arange(dim // 2, dtype=dtype) - low) / (high - low)).clamp(0, 1)
    pos_freqs = base ** (torch.arange(0, dim, 2, dtype=dtype) / dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    extrapolation_factor = 1 - ramp
    inv_freq = (interpolation * (1 - extrapolation_factor) +
                extrapolation * extrapolation_factor)
    return inv_freq, yarn_attention_factor(a)


def mla_softmax_scale(a):
    """DeepseekV3Attention's scaling: qk_head_dim^-0.5, times mscale(factor,
    mscale_all_dim)^2 under YaRN with mscale_all_dim set. None: plain 1/sqrt(dim)."""
    if not (uses_yarn(a) and a.yarn_mscale_all_dim):
        return None
    m = yarn_get_mscale(a.yarn_factor, a.yarn_mscale_all_dim)
    return (a.qk_nope_dim + a.qk_rope_dim) ** -0.5 * m * m


def rope_tables(a, seq, dtype):
    """cos, sin for the configured attention: over head_dim for Llama attention, over
    qk_rope_head_dim for MLA (DeepseekV3Config's head_dim), YaRN-scaled when on."""
    dim = a.qk_rope_dim if is_mla(a) else a.hidden // a.heads
    return rope_cos_sin(seq, dim, a.rope_theta, dtype, a if uses_yarn(a) else None)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def repeat_kv(x, n_rep):
    """(B, Hkv, T, D) -> (B, Hkv * n_rep, T, D): query head h reads kv head h // n_rep."""
    b, hkv, t, d = x.shape
    return x[:, :, None, :, :].expand(b, hkv, n_rep, t, d).reshape(b, hkv * n_rep, t, d)


class Routing:
    """What the MoE layers of one forward read and saw: the router correction biases
    (by name; absent ones are 0), and per MoE layer a Record of its tokens' routing."""

    class Record:
        def __init__(self, name, scores, chosen, margin):
            self.name = name  # the layer's bias buffer name
            self.scores = scores  # (B, T, E) sigmoid affinities, fp32 or wider, with grad
            self.chosen = chosen  # (B, T, k) expert ids
            self.margin = margin  # smallest gap of a routing decision (see route())

    def __init__(self, buffers=None):
        self.buffers = buffers or {}
        self.records = []


def forward_hidden(params, a, idx, routing=None, depth=0):
    """Final normalised hidden states for token ids idx (B, T): [h_0, h_1, .., h_depth],
    h_0 the main model's (what lm_head reads), h_k that of MTP depth k."""
    bsz, seq = idx.shape
    routing = routing if routing is not None else Routing()
    dtype = params["model.embed_tokens.weight"].dtype
    cos, sin = rope_tables(a, seq, dtype)
    future = torch.ones(seq, seq, dtype=torch.bool).triu(1)  # (T, T): key after query
    embed = params["model.embed_tokens.weight"]
    h = embed[idx]  # (B, T, C)
    for i in range(a.layers):
        h = decoder_layer(params, a, i, h, cos, sin, future, routing)
    hs = [rms_norm(h, params["model.norm.weight"], a.rms_eps)]
    for k in range(1, depth + 1):
        # DeepSeek-V3 MTP module k (report, eqs. 21-23): position i combines h_{k-1}[i]
        # with the embedding of token i + k (token 0 past the end, as Megatron's roll).
        p = f"model.layers.{a.layers + k - 1}."
        ahead = torch.cat((idx[:, k:], idx.new_zeros(bsz, min(k, seq))), dim=1)[:, :seq]
        e = rms_norm(embed[ahead], params[p + "enorm.weight"], a.rms_eps)
        prev = rms_norm(hs[-1], params[p + "hnorm.weight"], a.rms_eps)
        u = torch.cat((e, prev), dim=-1) @ params[p + "eh_proj.weight"].T
        u = decoder_layer(params, a, a.layers + k - 1, u, cos, sin, future, routing)
        hs.append(rms_norm(u, params[p + "shared_head.norm.weight"], a.rms_eps))
    return hs


def forward(params, a, idx, routing=None):
    """Logits (B, T, V) of the main model for token ids idx (B, T)."""
    return forward_hidden(params, a, idx, routing)[0] @ output_weight(params, a).T


def decoder_layer(params, a, i, h, cos, sin, future, routing):
    """LlamaDecoderLayer / DeepseekV3DecoderLayer i on the residual stream h (B, T, C)."""
    p = f"model.layers.{i}."
    x = rms_norm(h, params[p + "input_layernorm.weight"], a.rms_eps)
    if is_mla(a):
        h = h + mla_attention(params, a, p + "self_attn.", x, cos, sin, future)
    else:
        h = h + gqa_attention(params, a, p + "self_attn.", x, cos, sin, future)
    x = rms_norm(h, params[p + "post_attention_layernorm.weight"], a.rms_eps)
    if is_moe_layer(a, i):
        return h + moe_mlp(params, a, p + "mlp.", x, routing)
    return h + swiglu(params, p + "mlp.", x)


def swiglu(params, p, x):
    """LlamaMLP / DeepseekV3MLP: down(silu(gate(x)) * up(x))."""
    gate = x @ params[p + "gate_proj.weight"].T
    up = x @ params[p + "up_proj.weight"].T
    return (F.silu(gate) * up) @ params[p + "down_proj.weight"].T


def route(choice, a):
    """DeepseekV3TopkRouter.get_topk_indices on (N, E) choice values (sigmoid scores +
    correction bias): keep the topk_group groups whose top-2 choice values sum highest,
    then the top-k experts of those groups. Returns the (N, k) ids and the smallest
    margin of the decisions (between the last kept and first dropped group score, and
    between the k-th and (k+1)-th choice value of the kept groups); routing is
    piecewise constant and flips where a margin reaches 0. Dropped groups are masked
    with -inf (DeepSeek's own code); transformers masks with 0.0, which only differs
    if a kept expert's choice value is negative."""
    n, e = choice.shape
    margin = float("inf")
    if a.n_group > 1:
        group_scores = choice.view(n, a.n_group, e // a.n_group).topk(2, dim=-1)[0].sum(-1)
        if a.topk_group < a.n_group:
            ranked = group_scores.sort(dim=-1, descending=True)[0]
            margin = (ranked[:, a.topk_group - 1] - ranked[:, a.topk_group]).min().item()
        kept = group_scores.topk(a.topk_group, dim=-1)[1]
        group_mask = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, kept, True)
        choice = choice.masked_fill(~group_mask.repeat_interleave(e // a.n_group, dim=1),
                                    float("-inf"))
    ranked = choice.sort(dim=-1, descending=True)[0]
    if a.moe_topk < e and torch.isfinite(ranked[:, a.moe_topk]).all():
        margin = min(margin, (ranked[:, a.moe_topk - 1] - ranked[:, a.moe_topk]).min().item())
    return choice.topk(a.moe_topk, dim=-1)[1], margin


def moe_mlp(params, a, p, x, routing):
    """DeepseekV3MoE on (B, T, C): the router in (at least) fp32, sum_j w_j expert_j(x)
    over the chosen experts, plus the shared experts. Appends a Routing.Record."""
    bsz, seq, hidden = x.shape
    flat = x.reshape(-1, hidden)
    wide = torch.promote_types(x.dtype, torch.float32)
    scores = torch.sigmoid(flat.to(wide) @ params[p + "gate.weight"].to(wide).T)  # (N, E)
    bias = routing.buffers.get(p + "gate.e_score_correction_bias")
    choice = scores.detach() + (bias.to(wide) if bias is not None else 0.0)
    chosen, margin = route(choice, a)  # (N, k)
    weights = scores.gather(1, chosen)  # the affinities, without the bias
    if a.norm_topk_prob:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + ROUTER_NORM_EPS)
    weights = weights * a.routed_scaling
    out = torch.zeros_like(flat, dtype=wide)
    for j in range(a.moe_experts):
        tokens, slot = (chosen == j).nonzero(as_tuple=True)
        if tokens.numel():
            y = swiglu(params, p + f"experts.{j}.", flat[tokens])
            out = out.index_add(0, tokens, y * weights[tokens, slot, None])
    out = out.to(x.dtype).view(bsz, seq, hidden)
    if a.moe_shared > 0:
        out = out + swiglu(params, p + "shared_experts.", x)
    routing.records.append(Routing.Record(p + "gate.e_score_correction_bias",
                                          scores.view(bsz, seq, -1),
                                          chosen.view(bsz, seq, -1), margin))
    return out


def gqa_attention(params, a, p, x, cos, sin, future):
    """LlamaAttention: (B, T, C) normed input -> (B, T, C) o_proj output."""
    bsz, seq, _ = x.shape
    head_dim = a.hidden // a.heads
    q = (x @ params[p + "q_proj.weight"].T).view(bsz, seq, a.heads, head_dim)
    k = (x @ params[p + "k_proj.weight"].T).view(bsz, seq, a.kv_heads, head_dim)
    v = (x @ params[p + "v_proj.weight"].T).view(bsz, seq, a.kv_heads, head_dim)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    k = repeat_kv(k, a.heads // a.kv_heads)
    v = repeat_kv(v, a.heads // a.kv_heads)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(head_dim)  # (B, H, T, T)
    probs = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    y = (probs @ v).transpose(1, 2).reshape(bsz, seq, a.heads * head_dim)
    return y @ params[p + "o_proj.weight"].T


def interleave_to_halves(x):
    """HF's rope_interleave permutation of the last dim: (x0, x1, x2, x3, ...) ->
    (x0, x2, ..., x1, x3, ...), after which rotate-half RoPE rotates the pairs
    (x_2i, x_2i+1) by frequency i. The result stays in the permuted order (q and k
    alike, so their dot products are those of the unpermuted rotated pairs)."""
    *lead, d = x.shape
    return x.reshape(*lead, d // 2, 2).transpose(-1, -2).reshape(*lead, d)


def mla_attention(params, a, p, x, cos, sin, future):
    """DeepseekV3Attention (multi-head latent attention) on (B, T, C) normed input."""
    bsz, seq, _ = x.shape
    nope, rope, vdim = a.qk_nope_dim, a.qk_rope_dim, a.v_head_dim
    if a.q_lora_rank > 0:
        q_latent = rms_norm(x @ params[p + "q_a_proj.weight"].T,
                            params[p + "q_a_layernorm.weight"], MLA_LATENT_NORM_EPS)
        q = q_latent @ params[p + "q_b_proj.weight"].T
    else:
        q = x @ params[p + "q_proj.weight"].T
    q = q.view(bsz, seq, a.heads, nope + rope).transpose(1, 2)  # (B, H, T, nope + rope)
    q_pass, q_rot = q.split([nope, rope], dim=-1)
    compressed = x @ params[p + "kv_a_proj_with_mqa.weight"].T  # (B, T, L + rope)
    kv_latent, k_rot = compressed.split([a.kv_lora_rank, rope], dim=-1)
    kv = rms_norm(kv_latent, params[p + "kv_a_layernorm.weight"], MLA_LATENT_NORM_EPS)
    kv = (kv @ params[p + "kv_b_proj.weight"].T).view(bsz, seq, a.heads, nope + vdim)
    k_pass, v = kv.transpose(1, 2).split([nope, vdim], dim=-1)  # (B, H, T, .)
    k_rot = k_rot.view(bsz, 1, seq, rope)  # one rotary key shared by every head
    if a.rope_interleave:
        q_rot, k_rot = interleave_to_halves(q_rot), interleave_to_halves(k_rot)
    q_rot = q_rot * cos + rotate_half(q_rot) * sin
    k_rot = k_rot * cos + rotate_half(k_rot) * sin
    q = torch.cat((q_pass, q_rot), dim=-1)
    k = torch.cat((k_pass, k_rot.expand(bsz, a.heads, seq, rope)), dim=-1)
    scale = mla_softmax_scale(a)
    if scale is None:
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(nope + rope)  # (B, H, T, T)
    else:
        scores = (q @ k.transpose(-1, -2)) * scale
    probs = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    y = (probs @ v).transpose(1, 2).reshape(bsz, seq, a.heads * vdim)
    return y @ params[p + "o_proj.weight"].T


def token_ce_sum(params, a, batch):
    """Summed cross-entropy of a (b, T + 1) token batch: inputs first T, targets last T."""
    logits = forward(params, a, batch[:, :-1])
    return F.cross_entropy(logits.reshape(-1, a.vocab), batch[:, 1:].reshape(-1),
                           reduction="sum")


class Terms:
    """One micro-batch's pieces of the objective (tensors with grad) and its routing."""

    def __init__(self, ce_sum, mtp_ce_sums, routing):
        self.ce_sum = ce_sum  # main cross-entropy summed over the b * T targets
        self.mtp_ce_sums = mtp_ce_sums  # [depth k: CE summed over the b * (T - k) targets]
        self.routing = routing


def micro_batch_terms(params, a, batch, buffers=None):
    """Main and MTP cross-entropy sums of a (b, T + 1) batch. MTP depth k predicts, at
    position i < T - k, target i + k (token i + k + 1) from h_k[i], with the shared head."""
    routing = Routing(buffers)
    inputs, targets = batch[:, :-1], batch[:, 1:]
    seq = inputs.shape[1]
    hs = forward_hidden(params, a, inputs, routing, a.mtp_depth)
    w_out = output_weight(params, a)
    ce_sum = F.cross_entropy((hs[0] @ w_out.T).reshape(-1, a.vocab), targets.reshape(-1),
                             reduction="sum")
    mtp = [F.cross_entropy((h[:, :seq - k] @ w_out.T).reshape(-1, a.vocab),
                           targets[:, k:].reshape(-1), reduction="sum")
           for k, h in enumerate(hs[1:], start=1)]
    return Terms(ce_sum, mtp, routing)


def expert_counts(record, num_experts):
    """(B, E) number of each sequence's tokens that chose each expert."""
    bsz = record.chosen.shape[0]
    flat = record.chosen.reshape(bsz, -1)
    return torch.zeros(bsz, num_experts, dtype=torch.long).scatter_add_(
        1, flat, torch.ones_like(flat))


def balance_loss(a, record, global_seqs):
    """This micro-batch's share of one MoE layer's sequence-wise balance loss (DeepSeek-V3
    report, eqs. 17-20; docs/architecture.md): alpha * sum over its sequences of sum_i f_i P_i,
    over the global batch's sequence count. f_i = E / (k T) * (tokens choosing i),
    a constant; P_i = mean over the T tokens of s_i / sum_j s_j."""
    scores = record.scores  # (b, T, E)
    seq, num_experts = scores.shape[1], scores.shape[2]
    f = expert_counts(record, num_experts).to(scores.dtype) * (num_experts / (a.moe_topk * seq))
    p = (scores / scores.sum(dim=-1, keepdim=True)).mean(dim=1)  # (b, E)
    return a.aux_loss_alpha * (f * p).sum() / global_seqs


def micro_batch_objective(params, a, batch, buffers=None):
    """(objective, terms): the micro-batch's share of the step's objective, whose backward
    adds its share of the gradient. Objective = main CE / (B T) + lambda / D *
    sum_k CE_k / (B (T - k)) + the balance share of every MoE layer (B, T global)."""
    terms = micro_batch_terms(params, a, batch, buffers)
    objective = terms.ce_sum / (a.global_batch * a.seq)
    if a.mtp_depth > 0:
        objective = objective + a.mtp_scale / a.mtp_depth * sum(
            ce / (a.global_batch * (a.seq - k)) for k, ce in enumerate(terms.mtp_ce_sums, 1))
    for record in terms.routing.records:
        objective = objective + balance_loss(a, record, a.global_batch)
    return objective, terms


# ----------------------------------------------------------------------------
# Training, as docs/architecture.md "Numerics of one step" says.

def lr_at(step, a):
    """LR of optimizer step `step` (from 1): linear warmup, then cosine to min_lr."""
    w = a.warmup
    if w > 0 and step <= w:
        return a.lr * step / w
    decay_steps = a.steps - w - 1
    if decay_steps <= 0:
        return a.lr
    progress = (step - w - 1) / decay_steps
    return a.min_lr + (a.lr - a.min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def make_optimizer(params, a):
    """torch AdamW; weight decay on matrices only, none on norm weights."""
    tensors = list(params.values())
    groups = [
        {"params": [p for p in tensors if p.dim() >= 2], "weight_decay": a.weight_decay},
        {"params": [p for p in tensors if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps)


def step_samples(tokens, a, step):
    """(B, T + 1) token rows of optimizer step `step`, sample i = tokens[i*T : i*T + T + 1]."""
    first = (step - 1) * a.global_batch
    rows = [tokens[i * a.seq:i * a.seq + a.seq + 1] for i in range(first, first + a.global_batch)]
    return torch.stack(rows)


def accumulate_grads(params, a, samples, buffers=None, stats=None):
    """Backward per micro-batch of its share of the objective (token-sum CE / global token
    count, plus MTP and balance terms); returns the loss (main mean CE). With `stats` (a
    dict), also fills in the step's "aux_loss" (balance terms as added to the objective,
    summed over layers), "mtp_loss" (mean over depths of each depth's mean CE), "loads"
    (per MoE layer, by bias name: tokens per expert over the global batch) and
    "router_margin" (smallest routing margin seen)."""
    global_tokens = a.global_batch * a.seq
    loss = aux = 0.0
    mtp = [0.0] * a.mtp_depth
    loads, margin = {}, float("inf")
    for start in range(0, a.global_batch, a.micro_batch):
        objective, terms = micro_batch_objective(params, a, samples[start:start + a.micro_batch],
                                                 buffers)
        objective.backward()
        loss += terms.ce_sum.item() / global_tokens
        for k, ce in enumerate(terms.mtp_ce_sums, start=1):
            mtp[k - 1] += ce.item() / (a.global_batch * (a.seq - k))
        for record in terms.routing.records:
            aux += balance_loss(a, record, a.global_batch).item()
            counts = expert_counts(record, a.moe_experts).sum(0)
            loads[record.name] = loads.get(record.name, 0) + counts
            margin = min(margin, record.margin)
    if stats is not None:
        stats.update(aux_loss=aux, mtp_loss=sum(mtp) / len(mtp) if mtp else 0.0, loads=loads,
                     router_margin=margin)
    return loss


def update_router_biases(buffers, loads, speed):
    """After an optimizer step (docs/architecture.md; DeepSeek-V3's auxiliary-loss-free balancing):
    b_i += speed * sign(mean load - load_i), per MoE layer, loads over the global batch."""
    for name, load in loads.items():
        load = load.to(torch.float64)
        buffers[name] += speed * torch.sign(load.mean() - load).to(buffers[name].dtype)


def load_imbalance(loads):
    """Max over MoE layers of (max tokens per expert) / (mean tokens per expert)."""
    return max((load.max() / load.double().mean()).item() for load in loads.values())


def global_grad_norm(params):
    return torch.sqrt(sum((p.grad.double() ** 2).sum() for p in params.values())).item()


def train(params, tokens, a, buffers=None):
    """Runs a.steps optimizer steps in place (the router biases in `buffers`, updated in
    place too); returns per-step loss, grad_norm, lr (and MoE / MTP metrics when on)."""
    if buffers is None:
        buffers = init_buffers(a, params["model.embed_tokens.weight"].dtype)
    optimizer = make_optimizer(params, a)
    history = {"loss": [], "grad_norm": [], "lr": []}
    if a.moe_experts > 0:
        history.update(aux_loss=[], moe_load_imbalance=[], router_margin=[])
    if a.mtp_depth > 0:
        history["mtp_loss"] = []
    for step in range(1, a.steps + 1):
        lr = lr_at(step, a)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad(set_to_none=True)
        stats = {}
        loss = accumulate_grads(params, a, step_samples(tokens, a, step), buffers, stats)
        for p in params.values():
            if p.grad is None:  # an expert no token chose: a zero gradient, still stepped
                p.grad = torch.zeros_like(p)
        if a.clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(list(params.values()), a.clip).item()
        else:
            norm = global_grad_norm(params)
        optimizer.step()
        if stats["loads"]:
            update_router_biases(buffers, stats["loads"], a.bias_update_speed)
        history["loss"].append(loss)
        history["grad_norm"].append(norm)
        history["lr"].append(lr)
        if a.moe_experts > 0:
            history["aux_loss"].append(stats["aux_loss"])
            history["moe_load_imbalance"].append(load_imbalance(stats["loads"])
                                                 if stats["loads"] else 1.0)
            margin = stats["router_margin"]
            history["router_margin"].append(margin if math.isfinite(margin) else None)
        if a.mtp_depth > 0:
            history["mtp_loss"].append(stats["mtp_loss"])
    return history


# ----------------------------------------------------------------------------
# Data and files.

def make_tokens(a, count, branching=4, restart=0.05):
    """A sparse random bigram chain: each token continues with one of `branching`
    successors (peaked probabilities), or with probability `restart` a uniform token."""
    gen = torch.Generator().manual_seed(a.seed + DATA_SEED_OFFSET)
    successors = torch.randint(a.vocab, (a.vocab, branching), generator=gen).tolist()
    probs = torch.softmax(2.0 * torch.randn(a.vocab, branching, generator=gen, dtype=torch.float64),
                          dim=1)
    cumulative = probs.cumsum(1).tolist()
    uniforms = torch.rand(count, 2, generator=gen, dtype=torch.float64).tolist()
    restarts = torch.randint(a.vocab, (count,), generator=gen).tolist()
    tokens = [restarts[0]]
    for i in range(1, count):
        if uniforms[i][0] < restart:
            tokens.append(restarts[i])
            continue
        row = cumulative[tokens[-1]]
        choice = min(bisect.bisect_right(row, uniforms[i][1]), branching - 1)
        tokens.append(successors[tokens[-1]][choice])
    return tokens


def write_llmc_shard(path, tokens):
    header = [0] * LLMC_HEADER_INTS
    header[:3] = [LLMC_MAGIC, LLMC_VERSION, len(tokens)]
    with open(path, "wb") as f:
        f.write(struct.pack(f"<{LLMC_HEADER_INTS}i", *header))
        f.write(np.asarray(tokens, dtype="<u2").tobytes())


def write_safetensors_f32(path, named_tensors):
    """Safetensors by hand: u64 header length, JSON header padded to 8 bytes, data."""
    header = {"__metadata__": {"format": "pt"}}
    blobs, offset = [], 0
    for name, tensor in named_tensors:
        blob = tensor.detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def write_textproto(path, a, out_dir):
    out_dir = os.path.abspath(out_dir)
    lines = [
        "# Generated by tests/reference/llama_reference.py: the run behind reference.json.",
        "model {",
        f"  vocab_size: {a.vocab}",
        f"  hidden_size: {a.hidden}",
        f"  num_hidden_layers: {a.layers}",
        f"  num_attention_heads: {a.heads}",
        f"  num_key_value_heads: {a.kv_heads}",
        f"  intermediate_size: {a.intermediate}",
        f"  rope_theta: {a.rope_theta!r}",
        f"  rms_norm_eps: {a.rms_eps!r}",
        f"  tie_word_embeddings: {'true' if a.tie else 'false'}",
    ]
    if is_mla(a):
        lines += [
            f"  kv_lora_rank: {a.kv_lora_rank}",
            f"  q_lora_rank: {a.q_lora_rank}",
            f"  qk_nope_head_dim: {a.qk_nope_dim}",
            f"  qk_rope_head_dim: {a.qk_rope_dim}",
            f"  v_head_dim: {a.v_head_dim}",
            f"  rope_interleave: {'true' if a.rope_interleave else 'false'}",
        ]
    if uses_yarn(a):
        lines += [
            f"  max_position_embeddings: {yarn_max_positions(a)}",
            "  rope_scaling {",
            '    rope_type: "yarn"',
            f"    factor: {a.yarn_factor!r}",
            f"    original_max_position_embeddings: {a.yarn_original_max_pos}",
            f"    beta_fast: {a.yarn_beta_fast!r}",
            f"    beta_slow: {a.yarn_beta_slow!r}",
            f"    mscale: {a.yarn_mscale!r}",
            f"    mscale_all_dim: {a.yarn_mscale_all_dim!r}",
            "  }",
        ]
    if a.moe_experts > 0:
        lines += [
            "  moe {",
            f"    n_routed_experts: {a.moe_experts}",
            f"    num_experts_per_tok: {a.moe_topk}",
            f"    n_shared_experts: {a.moe_shared}",
            f"    moe_intermediate_size: {a.moe_intermediate}",
            f"    first_k_dense_replace: {a.first_k_dense}",
            '    scoring_func: "sigmoid"',
            f"    norm_topk_prob: {'true' if a.norm_topk_prob else 'false'}",
            f"    routed_scaling_factor: {a.routed_scaling!r}",
            f"    n_group: {a.n_group}",
            f"    topk_group: {a.topk_group}",
            f"    aux_loss_alpha: {a.aux_loss_alpha!r}",
            f"    bias_update_speed: {a.bias_update_speed!r}",
            "  }",
        ]
    if a.mtp_depth > 0:
        lines.append(f"  num_nextn_predict_layers: {a.mtp_depth}")
    lines += [
        "}",
        "train {",
        f"  steps: {a.steps}",
        f"  global_batch_size: {a.global_batch}",
        f"  micro_batch_size: {a.micro_batch}",
        f"  seq_length: {a.seq}",
        f"  seed: {a.seed}",
        "  precision: FP32",
    ]
    if a.mtp_depth > 0:
        lines.append(f"  mtp_loss_scaling_factor: {a.mtp_scale!r}")
    lines += [
        "}",
        "optimizer {",
        f"  lr: {a.lr!r}",
        f"  min_lr: {a.min_lr!r}",
        f"  warmup_steps: {a.warmup}",
        f"  weight_decay: {a.weight_decay!r}",
        f"  beta1: {a.beta1!r}",
        f"  beta2: {a.beta2!r}",
        f"  eps: {a.eps!r}",
        f"  clip_grad: {a.clip!r}",
        "}",
        "data {",
        "  format: LLMC",
        f"  path: {json.dumps(os.path.join(out_dir, 'train.bin'))}",
        "  shuffle: false",
        "}",
        f"init_from: {json.dumps(os.path.join(out_dir, 'init.safetensors'))}",
        "log {",
        f"  metrics_path: {json.dumps(os.path.join(out_dir, 'metrics.jsonl'))}",
        "  interval: 1",
        "}",
    ]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


# Flags of the optional parts, left out of reference.json's "args" when the part is off
# (so runs without them write what they always wrote).
MOE_ARGS = ("moe_experts", "moe_topk", "moe_shared", "moe_intermediate", "first_k_dense",
            "n_group", "topk_group", "routed_scaling", "norm_topk_prob", "aux_loss_alpha",
            "bias_update_speed")
YARN_ARGS = ("yarn_factor", "yarn_original_max_pos", "yarn_beta_fast", "yarn_beta_slow",
             "yarn_mscale", "yarn_mscale_all_dim")
MTP_ARGS = ("mtp_depth", "mtp_scale")


def recorded_args(a):
    skip = {"out", "self_test"}
    for on, names in ((a.moe_experts > 0, MOE_ARGS), (uses_yarn(a), YARN_ARGS),
                      (a.mtp_depth > 0, MTP_ARGS)):
        skip.update(() if on else names)
    return {k: v for k, v in vars(a).items() if k not in skip}


def run(a):
    dtype = {"float32": torch.float32, "float64": torch.float64}[a.dtype]
    os.makedirs(a.out, exist_ok=True)
    init = init_state(a)
    write_safetensors_f32(os.path.join(a.out, "init.safetensors"), list(init.items()))
    tokens = make_tokens(a, a.steps * a.global_batch * a.seq + 1)
    write_llmc_shard(os.path.join(a.out, "train.bin"), tokens)
    write_textproto(os.path.join(a.out, "tetra.textproto"), a, a.out)

    params = {n: t.to(dtype).requires_grad_() for n, t in init.items() if not is_buffer(n)}
    buffers = {n: t.to(dtype) for n, t in init.items() if is_buffer(n)}
    history = train(params, torch.tensor(tokens, dtype=torch.long), a, buffers)
    with open(os.path.join(a.out, "reference.json"), "w") as f:
        json.dump({**history, "dtype": a.dtype, "args": recorded_args(a)}, f, indent=1)
        f.write("\n")
    for step, (loss, norm, lr) in enumerate(zip(history["loss"], history["grad_norm"],
                                                history["lr"]), start=1):
        extra = "".join(f"  {key} {history[key][step - 1]:.6g}"
                        for key in ("mtp_loss", "aux_loss") if key in history)
        print(f"step {step:4d}  loss {loss:.6f}  grad_norm {norm:.6f}  lr {lr:.6g}{extra}")
    print(f"wrote {a.out}/{{init.safetensors,train.bin,reference.json,tetra.textproto}}")


# ----------------------------------------------------------------------------
# Self-test: the model and step above against independent formulations.

def forward_by_loops(params, a, idx, buffers=None):
    """forward() again, one token and one head at a time: RMSNorm as x / rms,
    RoPE as a complex rotation of pairs, softmax by hand; MLA as the report's
    per-head equations (no interleave permutation, no rotate-half); MoE one token and
    one chosen expert at a time, experts picked by enumerating all choices."""
    out = []
    for b in range(idx.shape[0]):
        hs = main_hidden_by_loops(params, a, idx[b].tolist(), buffers or {}, [])
        w_out = output_weight(params, a)
        out.append(torch.stack([w_out @ h for h in hs]))
    return torch.stack(out)


def norm_by_hand(x, w, eps):
    return x / torch.sqrt((x * x).sum() / x.numel() + eps) * w


def main_hidden_by_loops(params, a, tokens, buffers, log):
    """The main model's normalised final hidden state at each position of one sequence."""
    hs = [params["model.embed_tokens.weight"][t] for t in tokens]
    for i in range(a.layers):
        hs = block_by_loops(params, a, i, hs, buffers, log)
    return [norm_by_hand(h, params["model.norm.weight"], a.rms_eps) for h in hs]


def block_by_loops(params, a, i, hs, buffers, log):
    """Decoder layer i on one sequence's residual vectors, one token at a time."""
    p = f"model.layers.{i}."
    xs = [norm_by_hand(h, params[p + "input_layernorm.weight"], a.rms_eps) for h in hs]
    if is_mla(a):
        hs = [h + y for h, y in zip(hs, mla_by_loops(params, a, p + "self_attn.", xs))]
    else:
        hs = [h + y for h, y in zip(hs, gqa_by_loops(params, a, p + "self_attn.", xs))]
    new_hs = []
    for h in hs:
        x = norm_by_hand(h, params[p + "post_attention_layernorm.weight"], a.rms_eps)
        if is_moe_layer(a, i):
            new_hs.append(h + moe_by_loops(params, a, p + "mlp.", x,
                                           buffers.get(p + BIAS_SUFFIX), log))
        else:
            new_hs.append(h + swiglu_by_hand(params, p + "mlp.", x))
    return new_hs


def swiglu_by_hand(params, p, x):
    gate = params[p + "gate_proj.weight"] @ x
    up = params[p + "up_proj.weight"] @ x
    return params[p + "down_proj.weight"] @ (gate / (1 + torch.exp(-gate)) * up)


def topk_by_enumeration(choice, a):
    """The experts of one token (sorted ids) by trying every choice: the topk_group groups
    with the largest sum of group scores (each the best sum of two of its experts), then
    the k experts of those groups with the largest sum of choice values."""
    from itertools import combinations
    e, g = len(choice), a.n_group
    groups = [range(j * (e // g), (j + 1) * (e // g)) for j in range(g)]
    allowed = range(e)
    if g > 1:
        group_score = [max(choice[x] + choice[y] for x, y in combinations(grp, 2))
                       for grp in groups]
        kept = max(combinations(range(g), a.topk_group),
                   key=lambda c: sum(group_score[j] for j in c))
        allowed = [x for j in kept for x in groups[j]]
    return sorted(max(combinations(allowed, a.moe_topk),
                      key=lambda c: sum(choice[x] for x in c)))


def moe_by_loops(params, a, p, x, bias, log):
    """DeepseekV3MoE on one token x (C,): sigmoid affinities, choice = affinity + bias,
    enumerated group-limited top-k, gates = the chosen affinities (normalised when
    norm_topk_prob) times routed_scaling, then sum of gate * expert(x) + shared experts.
    Logs (layer prefix, affinities, chosen) for the balance loss by hand."""
    s = [1 / (1 + torch.exp(-(params[p + "gate.weight"][j] @ x))) for j in range(a.moe_experts)]
    choice = [float(s[j]) + (float(bias[j]) if bias is not None else 0.0)
              for j in range(a.moe_experts)]
    chosen = topk_by_enumeration(choice, a)
    gates = [s[j] for j in chosen]
    if a.norm_topk_prob:
        total = sum(gates) + ROUTER_NORM_EPS
        gates = [g / total for g in gates]
    y = sum(a.routed_scaling * g * swiglu_by_hand(params, p + f"experts.{j}.", x)
            for g, j in zip(gates, chosen))
    if a.moe_shared > 0:
        y = y + swiglu_by_hand(params, p + "shared_experts.", x)
    log.append((p, [float(v) for v in s], chosen))
    return y


def balance_by_hand(a, log):
    """alpha * sum over MoE layers of sum_i f_i P_i for ONE sequence's routing log."""
    total = 0.0
    for layer in dict.fromkeys(p for p, _, _ in log):
        rows = [(s, c) for p, s, c in log if p == layer]
        t = len(rows)
        for i in range(a.moe_experts):
            f = a.moe_experts / (a.moe_topk * t) * sum(i in c for _, c in rows)
            pi = sum(s[i] / sum(s) for s, _ in rows) / t
            total += a.aux_loss_alpha * f * pi
    return total


def mtp_losses_by_loops(params, a, tokens, buffers, log):
    """[L_1 .. L_D] of one sequence (T + 1 tokens), position by position: depth k at
    position i projects [enorm(embed(x[i+k])); hnorm(h_{k-1}[i])] (token 0 past the end),
    runs block L + k - 1, normalises, and when i + k < T scores target x[i+k+1]."""
    x, y = tokens[:-1], tokens[1:]
    seq = len(x)
    embed, w_out = params["model.embed_tokens.weight"], output_weight(params, a)
    hs = main_hidden_by_loops(params, a, x, buffers, log)
    losses = []
    for k in range(1, a.mtp_depth + 1):
        p = f"model.layers.{a.layers + k - 1}."
        us = [params[p + "eh_proj.weight"] @ torch.cat((
            norm_by_hand(embed[x[i + k] if i + k < seq else 0], params[p + "enorm.weight"],
                         a.rms_eps),
            norm_by_hand(hs[i], params[p + "hnorm.weight"], a.rms_eps))) for i in range(seq)]
        hs = [norm_by_hand(u, params[p + "shared_head.norm.weight"], a.rms_eps)
              for u in block_by_loops(params, a, a.layers + k - 1, us, buffers, log)]
        nll = []
        for i in range(seq - k):
            logits = w_out @ hs[i]
            nll.append(torch.logsumexp(logits, 0) - logits[y[i + k]])
        losses.append(sum(nll) / len(nll))
    return losses


def yarn_by_hand(dim, base, a):
    """YaRN per frequency (arXiv 2309.00071; as its code and transformers compute it):
    frequency d turns r(d) = L / (2 pi base^(2d/D)) times over the original context L;
    frequencies with r >= beta_fast keep theta_d, those with r <= beta_slow become
    theta_d / s; between, a ramp linear in d from the last dim with r >= beta_fast to the
    first with r <= beta_slow (the paper's own gamma is linear in r instead). Returns
    the per-pair rates, the cos/sin gain and MLA's extra softmax factor."""
    big_l = a.yarn_original_max_pos
    s = yarn_max_positions(a) / big_l
    rot = [big_l / (2 * math.pi * base ** (2 * d / dim)) for d in range(dim)]
    lo = max([d for d in range(dim) if rot[d] >= a.yarn_beta_fast], default=0)
    hi = min([d for d in range(dim) if rot[d] <= a.yarn_beta_slow], default=dim - 1)
    rates = []
    for d in range(dim // 2):
        theta_d = base ** (-2 * d / dim)
        keep = 1.0 if d <= lo else 0.0 if d >= hi else 1 - (d - lo) / (hi - lo)
        rates.append(keep * theta_d + (1 - keep) * theta_d / s)

    def m(scale, mscale):  # sqrt(1/t) = 0.1 ln(s) + 1, the paper's temperature
        return 0.1 * mscale * math.log(scale) + 1 if scale > 1 else 1.0

    gain = (m(s, a.yarn_mscale) / m(s, a.yarn_mscale_all_dim)
            if a.yarn_mscale and a.yarn_mscale_all_dim else m(s, 1.0))
    extra = m(s, a.yarn_mscale_all_dim) ** 2 if a.yarn_mscale_all_dim else 1.0
    return torch.tensor(rates, dtype=torch.float64), gain, extra


def rope_by_complex(x, pos, theta, interleave, yarn=None):
    """x (D,) rotated at position pos: pair i is (x_2i, x_2i+1) when interleaved, else
    (x_i, x_i+D/2), turned by the complex phase pos * theta^(-2i/D) (with `yarn`, the
    args: YaRN's rates, and the result times its gain). Interleaved outputs stay in pair
    order (dot products are what matter)."""
    d = x.numel()
    rate = torch.exp(-(torch.arange(d // 2, dtype=torch.float64) * 2 / d) * math.log(theta))
    gain = 1.0
    if yarn is not None:
        rate, gain, _ = yarn_by_hand(d, theta, yarn)
    re, im = (x[0::2], x[1::2]) if interleave else (x[:d // 2], x[d // 2:])
    z = torch.complex(re, im) * torch.polar(torch.ones(d // 2, dtype=torch.float64), pos * rate)
    return torch.cat((z.real, z.imag)) * gain


def softmax_attend(scores, values):
    weights = torch.exp(scores - scores.max())
    weights = weights / weights.sum()
    return sum(weights[j] * values[j] for j in range(len(values)))


def mla_by_loops(params, a, p, xs):
    """DeepSeek-V3's MLA (report, eqs. 1-11) one token and one head at a time."""
    nope, rope, vd = a.qk_nope_dim, a.qk_rope_dim, a.v_head_dim

    def norm(x, w):
        return x / torch.sqrt((x * x).sum() / x.numel() + MLA_LATENT_NORM_EPS) * w

    if a.q_lora_rank > 0:
        qs = [params[p + "q_b_proj.weight"] @ norm(params[p + "q_a_proj.weight"] @ x,
                                                   params[p + "q_a_layernorm.weight"])
              for x in xs]
    else:
        qs = [params[p + "q_proj.weight"] @ x for x in xs]
    c = [params[p + "kv_a_proj_with_mqa.weight"] @ x for x in xs]
    kvs = [params[p + "kv_b_proj.weight"] @ norm(ct[:a.kv_lora_rank],
                                                 params[p + "kv_a_layernorm.weight"]) for ct in c]
    yarn = a if uses_yarn(a) else None
    extra = yarn_by_hand(rope, a.rope_theta, a)[2] if yarn else 1.0
    k_pe = [rope_by_complex(ct[a.kv_lora_rank:], j, a.rope_theta, a.rope_interleave, yarn)
            for j, ct in enumerate(c)]
    out = []
    for t in range(len(xs)):
        heads = []
        for hq in range(a.heads):
            qh = qs[t][hq * (nope + rope):(hq + 1) * (nope + rope)]
            q_pe = rope_by_complex(qh[nope:], t, a.rope_theta, a.rope_interleave, yarn)
            kv = [kvs[j][hq * (nope + vd):(hq + 1) * (nope + vd)] for j in range(t + 1)]
            scores = torch.stack([qh[:nope] @ kv[j][:nope] + q_pe @ k_pe[j]
                                  for j in range(t + 1)]) / math.sqrt(nope + rope) * extra
            heads.append(softmax_attend(scores, [kvj[nope:] for kvj in kv]))
        out.append(params[p + "o_proj.weight"] @ torch.cat(heads))
    return out


def gqa_by_loops(params, a, p, xs):
    """Llama attention one token and one head at a time."""
    seq = len(xs)
    d = a.hidden // a.heads
    group = a.heads // a.kv_heads
    yarn = a if uses_yarn(a) else None
    qs = [params[p + "q_proj.weight"] @ x for x in xs]
    ks = [params[p + "k_proj.weight"] @ x for x in xs]
    vs = [params[p + "v_proj.weight"] @ x for x in xs]
    out = []
    for t in range(seq):
        heads = []
        for hq in range(a.heads):
            kv = hq // group
            qv = rope_by_complex(qs[t][hq * d:(hq + 1) * d], t, a.rope_theta, False, yarn)
            scores = torch.stack([qv @ rope_by_complex(ks[j][kv * d:(kv + 1) * d], j,
                                                       a.rope_theta, False, yarn)
                                  for j in range(t + 1)]) / math.sqrt(d)
            heads.append(softmax_attend(scores, [vs[j][kv * d:(kv + 1) * d]
                                                 for j in range(t + 1)]))
        out.append(params[p + "o_proj.weight"] @ torch.cat(heads))
    return out


def adamw_by_hand(params, grads, state, a, step, lr):
    """One clipped AdamW step from the formulas (Loshchilov & Hutter; torch's eps placement)."""
    norm = math.sqrt(sum(float((g * g).sum()) for g in grads.values()))
    scale = min(1.0, a.clip / (norm + 1e-6)) if a.clip > 0 else 1.0
    for name, p in params.items():
        g = grads[name] * scale
        m, v = state.setdefault(name, (torch.zeros_like(p), torch.zeros_like(p)))
        m = a.beta1 * m + (1 - a.beta1) * g
        v = a.beta2 * v + (1 - a.beta2) * g * g
        state[name] = (m, v)
        decay = a.weight_decay if p.dim() >= 2 else 0.0
        m_hat = m / (1 - a.beta1 ** step)
        v_hat = v / (1 - a.beta2 ** step)
        params[name] = p * (1 - lr * decay) - lr * m_hat / (v_hat.sqrt() + a.eps)
    return norm


class SelfTest:
    def __init__(self):
        self.failures = 0

    def check(self, ok, what):
        print(f"{'ok  ' if ok else 'FAIL'}  {what}")
        self.failures += 0 if ok else 1


def self_test():
    t = SelfTest()
    base = parse_args(["--out", "unused"])
    tiny = parse_args(["--out", "unused", "--vocab", "11", "--hidden", "16", "--layers", "2",
                       "--heads", "4", "--kv-heads", "2", "--intermediate", "12", "--seq", "5",
                       "--global-batch", "4", "--micro-batch", "2", "--steps", "3",
                       "--warmup", "1", "--clip", "0.05", "--rope-theta", "7.0"])
    idx = torch.randint(tiny.vocab, (2, tiny.seq + 1), generator=torch.Generator().manual_seed(3))

    mla_cases = [  # (kv_lora_rank, q_lora_rank, rope_interleave); v_head_dim != qk dims
        (6, 5, True), (6, 0, True), (6, 5, False)]
    for tie, mla in [(False, None), (True, None)] + [(False, m) for m in mla_cases]:
        tiny.tie = tie
        tiny.kv_lora_rank, tiny.q_lora_rank, tiny.rope_interleave = mla or (0, 0, True)
        tiny.qk_nope_dim, tiny.qk_rope_dim, tiny.v_head_dim = 3, 4, 5
        what = f"tie={tie}" + (f", MLA kv_lora {mla[0]} q_lora {mla[1]} interleave {mla[2]}"
                               if mla else "")
        # Bigger than the N(0, 0.02) init so attention, RoPE and norms are far from trivial.
        params = {n: w.double() * (1.0 if w.dim() == 1 else 25.0) +
                  (0.3 * torch.randn(w.shape, dtype=torch.float64) if w.dim() == 1 else 0)
                  for n, w in init_params(tiny).items()}
        diff = (forward(params, tiny, idx[:, :-1]) -
                forward_by_loops(params, tiny, idx[:, :-1])).abs().max().item()
        t.check(diff < 1e-12, f"forward == per-token loop formulation ({what}): "
                              f"max |diff| {diff:.2e} < 1e-12")

        names = list(params)
        def loss_of(*tensors):
            return token_ce_sum(dict(zip(names, tensors)), tiny, idx) / idx[:, 1:].numel()
        inputs = tuple(params[n].clone().requires_grad_() for n in names)
        ok = torch.autograd.gradcheck(loss_of, inputs, eps=1e-6, atol=1e-7, rtol=1e-5,
                                      raise_exception=False)
        t.check(ok, f"autograd gradients == central differences, float64 ({what})")
    tiny.kv_lora_rank = tiny.q_lora_rank = 0

    # Cross-entropy by hand: logsumexp - target logit.
    tiny.tie = False
    params = {n: w.double() for n, w in init_params(tiny).items()}
    logits = forward(params, tiny, idx[:, :-1]).reshape(-1, tiny.vocab)
    targets = idx[:, 1:].reshape(-1)
    by_hand = sum(torch.logsumexp(logits[r], 0) - logits[r, targets[r]]
                  for r in range(targets.numel())).item()
    ce = token_ce_sum(params, tiny, idx).item()
    t.check(abs(ce - by_hand) < 1e-12, f"cross-entropy == logsumexp - logit: {ce:.12f}")

    # Micro-batching changes nothing: gradients of 4 micro-batches of 1 == 1 of 4.
    tokens = torch.tensor(make_tokens(tiny, 4 * tiny.seq + 1), dtype=torch.long)
    samples = step_samples(tokens, tiny, 1)
    grads, losses = [], []
    for micro in (1, 4):
        tiny.micro_batch = micro
        p = {n: w.clone().requires_grad_() for n, w in params.items()}
        losses.append(accumulate_grads(p, tiny, samples))
        grads.append({n: w.grad for n, w in p.items()})
    gdiff = max((grads[0][n] - grads[1][n]).abs().max().item() for n in params)
    t.check(abs(losses[0] - losses[1]) < 1e-12 and gdiff < 1e-14,
            f"micro-batch 1 x4 == 4 x1: loss diff {abs(losses[0] - losses[1]):.1e}, "
            f"grad diff {gdiff:.1e}")
    tiny.micro_batch = 2

    # The training step (clip, LR, torch AdamW, decay groups) == formulas by hand.
    tokens = torch.tensor(make_tokens(tiny, tiny.steps * tiny.global_batch * tiny.seq + 1),
                          dtype=torch.long)
    torch_params = {n: w.clone().requires_grad_() for n, w in params.items()}
    history = train(torch_params, tokens, tiny)
    hand_params, state = {n: w.clone() for n, w in params.items()}, {}
    for step in range(1, tiny.steps + 1):
        p = {n: w.clone().requires_grad_() for n, w in hand_params.items()}
        loss = accumulate_grads(p, tiny, step_samples(tokens, tiny, step))
        norm = adamw_by_hand(hand_params, {n: w.grad for n, w in p.items()}, state, tiny, step,
                             lr_at(step, tiny))
        t.check(abs(loss - history["loss"][step - 1]) < 1e-12 and
                abs(norm - history["grad_norm"][step - 1]) < 1e-12 * norm,
                f"step {step}: loss {loss:.10f} and grad norm {norm:.6f} (clipped to "
                f"{tiny.clip}) match torch's AdamW run")
    pdiff = max((hand_params[n] - torch_params[n]).abs().max().item() for n in params)
    t.check(pdiff < 1e-12, f"weights after {tiny.steps} steps == AdamW by hand: max |diff| "
                           f"{pdiff:.1e}")

    # LR schedule at its defining points.
    sched = parse_args(["--out", "unused", "--steps", "10", "--warmup", "2", "--lr", "1.0",
                        "--min-lr", "0.1"])
    lrs = [lr_at(s, sched) for s in range(1, 11)]
    t.check(lrs[0] == 0.5 and lrs[1] == 1.0 and lrs[2] == 1.0 and abs(lrs[9] - 0.1) < 1e-15
            and all(x >= y for x, y in zip(lrs[2:], lrs[3:]))
            and abs(lr_at(6, sched) - (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 3 / 7)))) < 1e-15,
            "lr: warmup s/w, lr at w+1, cosine down to min_lr at the last step")

    # The default run: loss goes down, and fp32 tracks fp64 far inside rtol 1e-4.
    tokens = torch.tensor(make_tokens(base, base.steps * base.global_batch * base.seq + 1),
                          dtype=torch.long)
    runs = {}
    for dtype in (torch.float32, torch.float64):
        p = {n: w.to(dtype).requires_grad_() for n, w in init_params(base).items()}
        runs[dtype] = train(p, tokens, base)
    l32, l64 = runs[torch.float32]["loss"], runs[torch.float64]["loss"]
    t.check(l64[-1] < l64[0] - 0.1, f"default run learns: loss {l64[0]:.4f} -> {l64[-1]:.4f}")
    rel = max(abs(x - y) / y for x, y in zip(l32, l64))
    t.check(rel < 1e-5, f"float32 losses == float64 losses within {rel:.1e} (< 1e-5)")

    self_test_yarn(t)
    self_test_routing(t)
    self_test_moe_mtp(t)

    print(f"{t.failures} failure(s)")
    return 1 if t.failures else 0


def self_test_yarn(t):
    """YaRN's frequencies against the paper's formula where the published code agrees
    with it, the ramp between, and the attention factors, at DeepSeek-V3's settings."""
    a = parse_args(["--out", "unused", "--yarn-factor", "40", "--yarn-original-max-pos", "4096",
                    "--seq", "16", "--yarn-mscale", "1", "--yarn-mscale-all-dim", "1"])
    dim, base, s, big_l = 64, 10000.0, 40.0, 4096
    inv_freq, gain = yarn_inv_freq(dim, base, a, torch.float64)

    def paper(d):  # arXiv 2309.00071 eq. for h(theta_d), alpha = beta_slow, beta = beta_fast
        theta = base ** (-2 * d / dim)
        r = big_l / (2 * math.pi / theta)
        gamma = 0.0 if r < 1 else 1.0 if r > 32 else (r - 1) / (32 - 1)
        return (1 - gamma) * theta / s + gamma * theta

    # r(10) = 36.6 > 32 > r(11); r(22) = 1.16 > 1 > r(23): the ramp spans dims 10 .. 23.
    outer = [0, 5, 10, 23, 28, 31]
    err = max(abs(inv_freq[d].item() / paper(d) - 1) for d in outer)
    t.check(err < 1e-14, f"yarn inv_freq == the paper's h(theta_d) at dims {outer} "
                         f"(outside the ramp): max rel err {err:.1e}")
    keep = [(inv_freq[d].item() - base ** (-2 * d / dim) / s) /
            (base ** (-2 * d / dim) * (1 - 1 / s)) for d in range(11, 23)]
    err = max(abs(k - (1 - (d - 10) / 13)) for k, d in zip(keep, range(11, 23)))
    t.check(err < 1e-12, f"yarn ramp dims 11..22 blend theta_d and theta_d/s with weight "
                         f"1 - (d - 10)/13 (linear in d): max err {err:.1e}")
    mscale = 0.1 * math.log(40) + 1
    scale = mla_softmax_scale(a) * math.sqrt(a.qk_nope_dim + a.qk_rope_dim)
    a.yarn_mscale = 0.0
    unset = yarn_attention_factor(a)
    a.yarn_mscale, a.yarn_mscale_all_dim = 1.0, 0.5
    mixed = yarn_attention_factor(a)
    t.check(gain == 1.0 and abs(scale - mscale ** 2) < 1e-15 and abs(unset - mscale) < 1e-15
            and abs(mixed - mscale / (0.05 * math.log(40) + 1)) < 1e-15,
            f"yarn attention factor 1 (mscale = mscale_all_dim = 1), MLA softmax scale x "
            f"{scale:.6f} = (0.1 ln 40 + 1)^2, {unset:.6f} with mscale unset, "
            f"{mixed:.6f} with 1 / 0.5")


def self_test_routing(t):
    """Group-limited top-k against enumerating every choice; the bias update's sign."""
    gen = torch.Generator().manual_seed(5)
    for e, groups, kept, k in ((8, 4, 2, 3), (12, 3, 1, 2), (6, 1, 1, 2), (8, 2, 2, 4)):
        a = parse_args(["--out", "unused", "--moe-experts", str(e), "--n-group", str(groups),
                        "--topk-group", str(kept), "--moe-topk", str(k)])
        # Scores + bias, some negative (a bias can push a choice value below 0).
        choice = torch.rand(300, e, generator=gen, dtype=torch.float64) - 0.2
        chosen, margin = route(choice, a)
        ok = all(sorted(chosen[n].tolist()) == topk_by_enumeration(choice[n].tolist(), a)
                 for n in range(choice.shape[0]))
        t.check(ok and margin > 0, f"group-limited top-k == enumeration over 300 tokens "
                                   f"(E {e}, n_group {groups}, topk_group {kept}, k {k})")
    loads = {"l": torch.tensor([10, 2, 6, 6, 0, 12])}  # mean 6
    buffers = {"l": torch.tensor([0.5, 0.0, -0.25, 0.0, 0.0, 0.0], dtype=torch.float64)}
    update_router_biases(buffers, loads, 0.125)
    want = torch.tensor([0.375, 0.125, -0.25, 0.0, 0.125, -0.125], dtype=torch.float64)
    t.check(torch.equal(buffers["l"], want),
            "bias update: overloaded experts down, underloaded up, mean-loaded unchanged")


def moe_mtp_args(extra):
    return parse_args(["--out", "unused", "--vocab", "11", "--hidden", "16", "--heads", "4",
                       "--kv-heads", "2", "--intermediate", "12", "--seq", "5",
                       "--global-batch", "4", "--micro-batch", "2", "--steps", "2",
                       "--warmup", "1", "--rope-theta", "7.0", "--moe-intermediate", "3",
                       "--qk-nope-dim", "3", "--qk-rope-dim", "4", "--v-head-dim", "5",
                       "--aux-loss-alpha", "0.3", "--bias-update-speed", "0.01"] + extra)


def test_params(a, seed):
    """float64 weights far from the N(0, 0.02) init (routers so that logits are O(1)),
    random norm weights and router biases."""
    gen = torch.Generator().manual_seed(seed)
    params = {}
    for n, w in init_params(a).items():
        if w.dim() == 1:
            params[n] = w.double() + 0.3 * torch.randn(w.shape, generator=gen, dtype=torch.float64)
        else:
            params[n] = w.double() * (10.0 if n.endswith("gate.weight") else 25.0)
    buffers = {n: 0.1 * torch.randn(b.shape, generator=gen, dtype=torch.float64)
               for n, b in init_buffers(a).items()}
    return params, buffers


def self_test_moe_mtp(t):
    """MoE, YaRN and MTP together: batched == loops, gradcheck, micro-batching, bias step."""
    cases = [  # GQA, tied, group-limited routing, two MTP depths; MLA, one depth, no groups
        ("GQA tied, yarn, MoE 6 experts 3 groups, MTP 2",
         ["--layers", "2", "--tie", "--yarn-factor", "2.5", "--yarn-original-max-pos", "20",
          "--moe-experts", "6", "--n-group", "3", "--topk-group", "2", "--moe-topk", "2",
          "--moe-shared", "1", "--first-k-dense", "1", "--routed-scaling", "2.5",
          "--mtp-depth", "2", "--mtp-scale", "0.3"]),
        ("MLA, yarn mscale 1/0.5, MoE 4 experts no norm, MTP 1",
         ["--layers", "1", "--kv-lora-rank", "6", "--q-lora-rank", "5", "--yarn-factor", "2.5",
          "--yarn-original-max-pos", "20", "--yarn-mscale", "1", "--yarn-mscale-all-dim", "0.5",
          "--moe-experts", "4", "--moe-topk", "3", "--moe-shared", "0", "--norm-topk-prob",
          "false", "--routed-scaling", "1.7", "--mtp-depth", "1", "--mtp-scale", "0.5"]),
    ]
    idx = torch.randint(11, (2, 6), generator=torch.Generator().manual_seed(4))
    for what, flags in cases:
        a = moe_mtp_args(flags)
        params, buffers = test_params(a, 7)
        # Main logits: batched vs one token / head / chosen expert at a time.
        diff = (forward(params, a, idx[:, :-1], Routing(buffers)) -
                forward_by_loops(params, a, idx[:, :-1], buffers)).abs().max().item()
        t.check(diff < 1e-12, f"forward == per-token loop formulation ({what}): "
                              f"max |diff| {diff:.2e}")
        # MTP depth losses and the balance term of one sequence, position by position.
        for b in range(idx.shape[0]):
            log = []
            loops = mtp_losses_by_loops(params, a, idx[b].tolist(), buffers, log)
            one = parse_args_like(a, global_batch=1, micro_batch=1)
            terms = micro_batch_terms(params, one, idx[b:b + 1], buffers)
            batched = [ce.item() / (a.seq - k) for k, ce in enumerate(terms.mtp_ce_sums, 1)]
            aux = sum(balance_loss(one, r, 1).item() for r in terms.routing.records)
            err = max(abs(x.item() - y) for x, y in zip(loops, batched))
            aux_err = abs(aux - balance_by_hand(a, log))
            t.check(err < 1e-12 and aux_err < 1e-14 and aux > 0,
                    f"sequence {b}: MTP losses {[round(v, 4) for v in batched]} == per-position "
                    f"loops (err {err:.1e}); balance term {aux:.6f} == by hand ({aux_err:.1e})")
        # Gradients of the whole objective (CE + MTP + balance) by central differences:
        # torch's element-wise gradcheck on the routers and the MTP norms (all elements of
        # every tensor would take minutes), and along a random direction in every tensor.
        full = parse_args_like(a, global_batch=2, micro_batch=2)
        p = {n: w.clone().requires_grad_() for n, w in params.items()}
        objective, terms = micro_batch_objective(p, full, idx, buffers)
        objective.backward()
        margin = min(r.margin for r in terms.routing.records)
        names = [n for n in params if n.endswith(("gate.weight", "norm.weight"))
                 and "layernorm" not in n]

        def loss_of(*tensors):
            return micro_batch_objective({**params, **dict(zip(names, tensors))}, full, idx,
                                         buffers)[0]
        inputs = tuple(params[n].clone().requires_grad_() for n in names)
        ok = torch.autograd.gradcheck(loss_of, inputs, eps=1e-6, atol=1e-7, rtol=1e-5,
                                      raise_exception=False)
        t.check(ok and margin > 1e-4, f"autograd gradients of CE + MTP + balance == central "
                                      f"differences, float64, every element of {len(names)} "
                                      f"router / MTP norm tensors ({what}; routing margin "
                                      f"{margin:.1e} >> eps 1e-6)")
        gen = torch.Generator().manual_seed(9)
        worst = 0.0
        for n in params:
            v = torch.randn(params[n].shape, generator=gen, dtype=torch.float64)
            f = [micro_batch_objective({**params, n: params[n] + sign * 1e-6 * v}, full, idx,
                                       buffers)[0].item() for sign in (1, -1)]
            grad = p[n].grad if p[n].grad is not None else torch.zeros_like(v)  # unchosen
            numeric, analytic = (f[0] - f[1]) / 2e-6, (grad * v).sum().item()
            worst = max(worst, abs(numeric - analytic) / (1e-7 + 1e-5 * abs(analytic)))
        t.check(worst < 1, f"autograd gradient == central difference along a random direction "
                           f"in each of {len(params)} tensors ({what}): worst error "
                           f"{worst:.1e} of tolerance 1e-7 + 1e-5 |d|")

    # Micro-batching: 4 x 1 == 1 x 4 for loss, MTP loss, balance loss, loads and gradients.
    a = moe_mtp_args(cases[0][1])
    params, buffers = test_params(a, 8)
    tokens = torch.tensor(make_tokens(a, 4 * a.seq + 1), dtype=torch.long)
    samples = step_samples(tokens, a, 1)
    results = []
    for micro in (1, 4):
        a.micro_batch = micro
        p = {n: w.clone().requires_grad_() for n, w in params.items()}
        stats = {}
        loss = accumulate_grads(p, a, samples, buffers, stats)
        results.append((loss, stats, {n: w.grad for n, w in p.items()}))
    (l1, s1, g1), (l4, s4, g4) = results
    gdiff = max((g1[n] - g4[n]).abs().max().item() for n in params)
    same_loads = all(torch.equal(s1["loads"][n], s4["loads"][n]) for n in s1["loads"])
    t.check(abs(l1 - l4) < 1e-13 and abs(s1["mtp_loss"] - s4["mtp_loss"]) < 1e-13 and
            abs(s1["aux_loss"] - s4["aux_loss"]) < 1e-15 and same_loads and gdiff < 1e-13,
            f"MoE + MTP micro-batch 1 x4 == 4 x1: loss, mtp_loss, aux_loss "
            f"{s1['aux_loss']:.5f}, loads ({len(s1['loads'])} layers) and grads (diff {gdiff:.1e})")

    # One training step: the biases move by speed * sign(mean - load) of the step's loads,
    # untouched by AdamW (no gradient, no decay); the loads come from a separate forward.
    a.steps, a.micro_batch = 1, 2
    start = {n: w.clone() for n, w in buffers.items()}
    loads = {}
    for record in micro_batch_terms(params, a, samples, buffers).routing.records:
        loads[record.name] = expert_counts(record, a.moe_experts).sum(0)
    p = {n: w.clone().requires_grad_() for n, w in params.items()}
    train(p, tokens, a, buffers)
    ok = all(torch.allclose(buffers[n] - start[n], a.bias_update_speed *
                            torch.sign(loads[n].double().mean() - loads[n].double()),
                            rtol=0, atol=1e-15) for n in buffers)
    t.check(ok and len(buffers) == 3 and all(not w.requires_grad for w in buffers.values()),
            f"training step: each of {len(buffers)} router biases += speed * sign(mean - load)")


def parse_args_like(a, **changes):
    copy = argparse.Namespace(**vars(a))
    for k, v in changes.items():
        setattr(copy, k, v)
    return copy


# ----------------------------------------------------------------------------

def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="output directory")
    ap.add_argument("--self-test", action="store_true", help="check this reference and exit")
    ap.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    ap.add_argument("--vocab", type=int, default=96)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--intermediate", type=int, default=48)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--global-batch", type=int, default=4)
    ap.add_argument("--micro-batch", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr", type=float, default=3e-4)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0, help="global grad-norm clip; 0 disables")
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--rms-eps", type=float, default=1e-5)
    ap.add_argument("--tie", action="store_true", help="tie lm_head to embed_tokens")
    ap.add_argument("--seed", type=int, default=0)
    mla = ap.add_argument_group("multi-head latent attention (DeepseekV3Attention); on when "
                                "--kv-lora-rank > 0, and --kv-heads is then unused")
    mla.add_argument("--kv-lora-rank", type=int, default=0)
    mla.add_argument("--q-lora-rank", type=int, default=0, help="0: a plain q_proj")
    mla.add_argument("--qk-nope-dim", type=int, default=8)
    mla.add_argument("--qk-rope-dim", type=int, default=4)
    mla.add_argument("--v-head-dim", type=int, default=8)
    mla.add_argument("--rope-interleave", choices=("true", "false"), default="true")
    moe = ap.add_argument_group(
        "mixture of experts (DeepseekV3MoE, sigmoid router with correction bias); on when "
        "--moe-experts > 0, in layers >= --first-k-dense (MTP blocks included)")
    moe.add_argument("--moe-experts", type=int, default=0, help="n_routed_experts; 0: dense")
    moe.add_argument("--moe-topk", type=int, default=2, help="num_experts_per_tok")
    moe.add_argument("--moe-shared", type=int, default=1, help="n_shared_experts")
    moe.add_argument("--moe-intermediate", type=int, default=16, help="moe_intermediate_size")
    moe.add_argument("--first-k-dense", type=int, default=0, help="first_k_dense_replace")
    moe.add_argument("--n-group", type=int, default=1)
    moe.add_argument("--topk-group", type=int, default=1)
    moe.add_argument("--routed-scaling", type=float, default=1.0, help="routed_scaling_factor")
    moe.add_argument("--norm-topk-prob", choices=("true", "false"), default="true")
    moe.add_argument("--aux-loss-alpha", type=float, default=1e-4,
                     help="weight of the sequence-wise balance loss")
    moe.add_argument("--bias-update-speed", type=float, default=1e-3)
    yarn = ap.add_argument_group(
        "YaRN rope scaling (transformers' rope_type yarn, as DeepSeek-V3 uses it); on when "
        "--yarn-factor > 0; max_position_embeddings = factor * original")
    yarn.add_argument("--yarn-factor", type=float, default=0.0)
    yarn.add_argument("--yarn-original-max-pos", type=int, default=0,
                      help="original_max_position_embeddings")
    yarn.add_argument("--yarn-beta-fast", type=float, default=32.0)
    yarn.add_argument("--yarn-beta-slow", type=float, default=1.0)
    yarn.add_argument("--yarn-mscale", type=float, default=0.0, help="0: unset")
    yarn.add_argument("--yarn-mscale-all-dim", type=float, default=0.0, help="0: unset")
    mtp = ap.add_argument_group("multi-token prediction (DeepSeek-V3 MTP modules); on when "
                                "--mtp-depth > 0")
    mtp.add_argument("--mtp-depth", type=int, default=0, help="num_nextn_predict_layers")
    mtp.add_argument("--mtp-scale", type=float, default=0.1,
                     help="lambda: the objective adds lambda / depth * sum of depth losses")
    a = ap.parse_args(argv)
    if not a.self_test and not a.out:
        ap.error("--out DIR is required")
    problems = []
    if min(a.vocab, a.hidden, a.layers, a.heads, a.kv_heads, a.intermediate, a.seq,
           a.global_batch, a.micro_batch, a.steps) <= 0:
        problems.append("sizes, batch sizes and steps must be positive")
    if a.vocab > 65536:
        problems.append(f"--vocab {a.vocab} does not fit the llm.c uint16 shard (max 65536)")
    if a.kv_lora_rank <= 0 and (a.hidden % a.heads or (a.hidden // a.heads) % 2):
        problems.append(f"--hidden {a.hidden} must split into {a.heads} heads of even size")
    if a.heads % a.kv_heads:
        problems.append(f"--heads {a.heads} must be a multiple of --kv-heads {a.kv_heads}")
    if a.global_batch % a.micro_batch:
        problems.append(f"--global-batch {a.global_batch} must be a multiple of "
                        f"--micro-batch {a.micro_batch}")
    if a.warmup < 0 or a.seed < 0:
        problems.append("--warmup and --seed must be non-negative")
    a.rope_interleave = a.rope_interleave == "true"
    if min(a.kv_lora_rank, a.q_lora_rank) < 0:
        problems.append("--kv-lora-rank and --q-lora-rank must be non-negative")
    if a.kv_lora_rank > 0:
        if a.qk_nope_dim < 0 or a.qk_rope_dim <= 0 or a.qk_rope_dim % 2 or a.v_head_dim <= 0:
            problems.append("MLA needs --qk-nope-dim >= 0, an even --qk-rope-dim > 0 and "
                            "--v-head-dim > 0")
    elif a.q_lora_rank > 0:
        problems.append("--q-lora-rank needs --kv-lora-rank > 0 (MLA)")
    a.norm_topk_prob = a.norm_topk_prob == "true"
    if a.moe_experts < 0:
        problems.append("--moe-experts must be non-negative")
    if a.moe_experts > 0:
        e = a.moe_experts
        if min(a.moe_topk, a.moe_intermediate, a.n_group, a.topk_group) <= 0 or \
                min(a.moe_shared, a.first_k_dense) < 0:
            problems.append("MoE needs positive --moe-topk, --moe-intermediate, --n-group, "
                            "--topk-group and non-negative --moe-shared, --first-k-dense")
        elif e % a.n_group or (a.n_group > 1 and e // a.n_group < 2):
            problems.append(f"--moe-experts {e} must split into --n-group {a.n_group} "
                            f"groups of at least 2 (group scores sum each group's top 2)")
        elif a.topk_group > a.n_group or a.moe_topk > a.topk_group * (e // a.n_group):
            problems.append(f"need --topk-group <= --n-group and --moe-topk <= the experts of "
                            f"--topk-group groups ({a.topk_group * (e // a.n_group)})")
    if a.yarn_factor < 0:
        problems.append("--yarn-factor must be non-negative")
    if a.yarn_factor > 0:
        if a.yarn_original_max_pos <= 0 or a.yarn_beta_fast <= 0 or a.yarn_beta_slow <= 0:
            problems.append("YaRN needs --yarn-original-max-pos > 0 and positive betas")
        elif abs(a.yarn_factor * a.yarn_original_max_pos - yarn_max_positions(a)) > 1e-9:
            problems.append("--yarn-factor times --yarn-original-max-pos must be a whole "
                            "number (max_position_embeddings)")
        elif a.seq > yarn_max_positions(a):
            problems.append(f"--seq {a.seq} exceeds max_position_embeddings "
                            f"{yarn_max_positions(a)}")
        rope_dim = a.qk_rope_dim if a.kv_lora_rank > 0 else a.hidden // max(a.heads, 1)
        if rope_dim < 2:
            problems.append("YaRN needs a rotary dim of at least 2")
    if a.mtp_depth < 0 or (a.mtp_depth > 0 and a.mtp_depth >= a.seq):
        problems.append("--mtp-depth must be non-negative and less than --seq")
    if problems:
        ap.error("; ".join(problems))
    return a


def main(argv):
    a = parse_args(argv)
    torch.manual_seed(a.seed)  # only the self-test's scratch draws use the global RNG
    if a.self_test:
        return self_test()
    run(a)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
