#!/usr/bin/python3
"""Independent PyTorch reference of LlamaForCausalLM training, to check tetra.

Written from Hugging Face's LlamaForCausalLM math (no `transformers` import)
and DESIGN.md's "Numerics of one step". One run writes, into --out DIR:

  init.safetensors  initial weights, HF names, F32 (written by hand here, not
                    by tetra's writer)
  train.bin         an llm.c shard (magic 20240520, uint16 tokens) of
                    steps * global_batch * seq + 1 tokens from a sparse random
                    bigram chain, so the loss has something to learn
  reference.json    {"loss": [...], "grad_norm": [...], "lr": [...]}, one entry
                    per optimizer step (grad_norm before clipping)
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


# ----------------------------------------------------------------------------
# Model: parameters live in a dict of leaf tensors keyed by HF names.

def param_shapes(a):
    """(name, shape) for every parameter, in HF LlamaForCausalLM order."""
    head_dim = a.hidden // a.heads
    shapes = [("model.embed_tokens.weight", (a.vocab, a.hidden))]
    for i in range(a.layers):
        p = f"model.layers.{i}."
        shapes += [
            (p + "input_layernorm.weight", (a.hidden,)),
        ]
        shapes += mla_param_shapes(a, p + "self_attn.") if is_mla(a) else [
            (p + "self_attn.q_proj.weight", (a.heads * head_dim, a.hidden)),
            (p + "self_attn.k_proj.weight", (a.kv_heads * head_dim, a.hidden)),
            (p + "self_attn.v_proj.weight", (a.kv_heads * head_dim, a.hidden)),
            (p + "self_attn.o_proj.weight", (a.hidden, a.heads * head_dim)),
        ]
        shapes += [
            (p + "post_attention_layernorm.weight", (a.hidden,)),
            (p + "mlp.gate_proj.weight", (a.intermediate, a.hidden)),
            (p + "mlp.up_proj.weight", (a.intermediate, a.hidden)),
            (p + "mlp.down_proj.weight", (a.hidden, a.intermediate)),
        ]
    shapes.append(("model.norm.weight", (a.hidden,)))
    if not a.tie:
        shapes.append(("lm_head.weight", (a.vocab, a.hidden)))
    return shapes


def is_mla(a):
    return a.kv_lora_rank > 0


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


def init_params(a):
    """fp32 weights from torch's RNG: matrices N(0, 0.02^2), norm weights 1."""
    gen = torch.Generator().manual_seed(a.seed)
    params = {}
    for name, shape in param_shapes(a):
        if len(shape) == 1:
            params[name] = torch.ones(shape, dtype=torch.float32)
        else:
            params[name] = torch.empty(shape, dtype=torch.float32).normal_(0.0, INIT_STD,
                                                                           generator=gen)
    return params


def output_weight(params, a):
    return params["model.embed_tokens.weight"] if a.tie else params["lm_head.weight"]


def rms_norm(x, weight, eps):
    """HF LlamaRMSNorm: normalise in (at least) fp32, then scale by the weight."""
    wide = x.to(torch.promote_types(x.dtype, torch.float32))
    wide = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + eps)
    return weight * wide.to(x.dtype)


def rope_cos_sin(seq, head_dim, theta, dtype):
    """(T, D) cos and sin of HF's rotate-half RoPE at positions 0..T-1."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=dtype) / head_dim))
    freqs = torch.outer(torch.arange(seq, dtype=dtype), inv_freq)  # (T, D/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (T, D)
    return emb.cos(), emb.sin()


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def repeat_kv(x, n_rep):
    """(B, Hkv, T, D) -> (B, Hkv * n_rep, T, D): query head h reads kv head h // n_rep."""
    b, hkv, t, d = x.shape
    return x[:, :, None, :, :].expand(b, hkv, n_rep, t, d).reshape(b, hkv * n_rep, t, d)


def forward(params, a, idx):
    """Logits (B, T, V) for token ids idx (B, T)."""
    bsz, seq = idx.shape
    head_dim = a.hidden // a.heads
    dtype = params["model.embed_tokens.weight"].dtype
    cos, sin = rope_cos_sin(seq, head_dim, a.rope_theta, dtype)  # Llama's; MLA makes its own
    future = torch.ones(seq, seq, dtype=torch.bool).triu(1)  # (T, T): key after query
    h = params["model.embed_tokens.weight"][idx]  # (B, T, C)
    for i in range(a.layers):
        p = f"model.layers.{i}."
        x = rms_norm(h, params[p + "input_layernorm.weight"], a.rms_eps)
        if is_mla(a):
            h = h + mla_attention(params, a, p + "self_attn.", x, future)
        else:
            h = h + gqa_attention(params, a, p + "self_attn.", x, cos, sin, future)
        x = rms_norm(h, params[p + "post_attention_layernorm.weight"], a.rms_eps)
        gate = x @ params[p + "mlp.gate_proj.weight"].T
        up = x @ params[p + "mlp.up_proj.weight"].T
        h = h + (F.silu(gate) * up) @ params[p + "mlp.down_proj.weight"].T
    h = rms_norm(h, params["model.norm.weight"], a.rms_eps)
    return h @ output_weight(params, a).T


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


def mla_attention(params, a, p, x, future):
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
    cos, sin = rope_cos_sin(seq, rope, a.rope_theta, x.dtype)
    if a.rope_interleave:
        q_rot, k_rot = interleave_to_halves(q_rot), interleave_to_halves(k_rot)
    q_rot = q_rot * cos + rotate_half(q_rot) * sin
    k_rot = k_rot * cos + rotate_half(k_rot) * sin
    q = torch.cat((q_pass, q_rot), dim=-1)
    k = torch.cat((k_pass, k_rot.expand(bsz, a.heads, seq, rope)), dim=-1)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(nope + rope)  # (B, H, T, T)
    probs = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    y = (probs @ v).transpose(1, 2).reshape(bsz, seq, a.heads * vdim)
    return y @ params[p + "o_proj.weight"].T


def token_ce_sum(params, a, batch):
    """Summed cross-entropy of a (b, T + 1) token batch: inputs first T, targets last T."""
    logits = forward(params, a, batch[:, :-1])
    return F.cross_entropy(logits.reshape(-1, a.vocab), batch[:, 1:].reshape(-1),
                           reduction="sum")


# ----------------------------------------------------------------------------
# Training, as DESIGN.md "Numerics of one step" says.

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


def accumulate_grads(params, a, samples):
    """Backward per micro-batch of token-sum CE / global token count; returns the loss."""
    global_tokens = a.global_batch * a.seq
    loss = 0.0
    for start in range(0, a.global_batch, a.micro_batch):
        ce_sum = token_ce_sum(params, a, samples[start:start + a.micro_batch])
        (ce_sum / global_tokens).backward()
        loss += ce_sum.item() / global_tokens
    return loss


def global_grad_norm(params):
    return torch.sqrt(sum((p.grad.double() ** 2).sum() for p in params.values())).item()


def train(params, tokens, a):
    """Runs a.steps optimizer steps in place; returns per-step loss, grad_norm, lr."""
    optimizer = make_optimizer(params, a)
    history = {"loss": [], "grad_norm": [], "lr": []}
    for step in range(1, a.steps + 1):
        lr = lr_at(step, a)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad(set_to_none=True)
        loss = accumulate_grads(params, a, step_samples(tokens, a, step))
        if a.clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(list(params.values()), a.clip).item()
        else:
            norm = global_grad_norm(params)
        optimizer.step()
        history["loss"].append(loss)
        history["grad_norm"].append(norm)
        history["lr"].append(lr)
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
    lines += [
        "}",
        "train {",
        f"  steps: {a.steps}",
        f"  global_batch_size: {a.global_batch}",
        f"  micro_batch_size: {a.micro_batch}",
        f"  seq_length: {a.seq}",
        f"  seed: {a.seed}",
        "  precision: FP32",
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


def run(a):
    dtype = {"float32": torch.float32, "float64": torch.float64}[a.dtype]
    os.makedirs(a.out, exist_ok=True)
    init = init_params(a)
    write_safetensors_f32(os.path.join(a.out, "init.safetensors"), list(init.items()))
    tokens = make_tokens(a, a.steps * a.global_batch * a.seq + 1)
    write_llmc_shard(os.path.join(a.out, "train.bin"), tokens)
    write_textproto(os.path.join(a.out, "tetra.textproto"), a, a.out)

    params = {n: t.to(dtype).requires_grad_() for n, t in init.items()}
    history = train(params, torch.tensor(tokens, dtype=torch.long), a)
    with open(os.path.join(a.out, "reference.json"), "w") as f:
        json.dump({**history, "dtype": a.dtype, "args": {k: v for k, v in vars(a).items()
                                                         if k not in ("out", "self_test")}},
                  f, indent=1)
        f.write("\n")
    for step, (loss, norm, lr) in enumerate(zip(history["loss"], history["grad_norm"],
                                                history["lr"]), start=1):
        print(f"step {step:4d}  loss {loss:.6f}  grad_norm {norm:.6f}  lr {lr:.6g}")
    print(f"wrote {a.out}/{{init.safetensors,train.bin,reference.json,tetra.textproto}}")


# ----------------------------------------------------------------------------
# Self-test: the model and step above against independent formulations.

def forward_by_loops(params, a, idx):
    """forward() again, one token and one head at a time: RMSNorm as x / rms,
    RoPE as a complex rotation of pairs, softmax by hand; MLA as the report's
    per-head equations (no interleave permutation, no rotate-half)."""
    bsz, seq = idx.shape

    def norm(x, w):
        return x / torch.sqrt((x * x).sum() / x.numel() + a.rms_eps) * w

    out = []
    for b in range(bsz):
        hs = [params["model.embed_tokens.weight"][idx[b, t]] for t in range(seq)]
        for i in range(a.layers):
            p = f"model.layers.{i}."
            xs = [norm(h, params[p + "input_layernorm.weight"]) for h in hs]
            if is_mla(a):
                hs = [h + y for h, y in zip(hs, mla_by_loops(params, a, p + "self_attn.", xs))]
            else:
                hs = [h + y for h, y in zip(hs, gqa_by_loops(params, a, p + "self_attn.", xs))]
            new_hs = []
            for h in hs:
                x = norm(h, params[p + "post_attention_layernorm.weight"])
                gate = params[p + "mlp.gate_proj.weight"] @ x
                up = params[p + "mlp.up_proj.weight"] @ x
                new_hs.append(h + params[p + "mlp.down_proj.weight"] @
                              (gate / (1 + torch.exp(-gate)) * up))
            hs = new_hs
        w_out = output_weight(params, a)
        out.append(torch.stack([w_out @ norm(h, params["model.norm.weight"]) for h in hs]))
    return torch.stack(out)


def rope_by_complex(x, pos, theta, interleave):
    """x (D,) rotated at position pos: pair i is (x_2i, x_2i+1) when interleaved, else
    (x_i, x_i+D/2), turned by the complex phase pos * theta^(-2i/D). Interleaved
    outputs stay in pair order (dot products are what matter)."""
    d = x.numel()
    rate = torch.exp(-(torch.arange(d // 2, dtype=torch.float64) * 2 / d) * math.log(theta))
    re, im = (x[0::2], x[1::2]) if interleave else (x[:d // 2], x[d // 2:])
    z = torch.complex(re, im) * torch.polar(torch.ones(d // 2, dtype=torch.float64), pos * rate)
    return torch.cat((z.real, z.imag))


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
    k_pe = [rope_by_complex(ct[a.kv_lora_rank:], j, a.rope_theta, a.rope_interleave)
            for j, ct in enumerate(c)]
    out = []
    for t in range(len(xs)):
        heads = []
        for hq in range(a.heads):
            qh = qs[t][hq * (nope + rope):(hq + 1) * (nope + rope)]
            q_pe = rope_by_complex(qh[nope:], t, a.rope_theta, a.rope_interleave)
            kv = [kvs[j][hq * (nope + vd):(hq + 1) * (nope + vd)] for j in range(t + 1)]
            scores = torch.stack([qh[:nope] @ kv[j][:nope] + q_pe @ k_pe[j]
                                  for j in range(t + 1)]) / math.sqrt(nope + rope)
            heads.append(softmax_attend(scores, [kvj[nope:] for kvj in kv]))
        out.append(params[p + "o_proj.weight"] @ torch.cat(heads))
    return out


def gqa_by_loops(params, a, p, xs):
    """Llama attention one token and one head at a time."""
    seq = len(xs)
    d = a.hidden // a.heads
    group = a.heads // a.kv_heads
    qs = [params[p + "q_proj.weight"] @ x for x in xs]
    ks = [params[p + "k_proj.weight"] @ x for x in xs]
    vs = [params[p + "v_proj.weight"] @ x for x in xs]
    out = []
    for t in range(seq):
        heads = []
        for hq in range(a.heads):
            kv = hq // group
            qv = rope_by_complex(qs[t][hq * d:(hq + 1) * d], t, a.rope_theta, False)
            scores = torch.stack([qv @ rope_by_complex(ks[j][kv * d:(kv + 1) * d], j,
                                                       a.rope_theta, False)
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

    print(f"{t.failures} failure(s)")
    return 1 if t.failures else 0


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
