#!/usr/bin/env python3
"""Hugging Face model directories in and out, against `transformers` itself.

For each case transformers' own LlamaForCausalLM (random init) is saved with
save_pretrained, sharded into several files with an index or as one file,
and then:
  1. tetra trains from the directory alone (no model section in the recipe:
     it comes from config.json) on an llm.c shard; its step-1 loss equals
     transformers' loss of the same weights on the same samples (1e-5
     relative);
  2. tetra's export after one step loads in transformers (from_pretrained
     reads the exported config.json, rope_scaling included), and its loss on
     the second step's samples equals tetra's step-2 loss (1e-5 relative).
Cases: GQA with Llama 3.1's rope_scaling (original context 64 with head_dim
8, so frequencies are kept, blended and divided: every branch of the scaling
counts), sharded; tied embeddings without scaling, one file; bf16 weights.
The scaled case also checks that dropping the scaling changes transformers'
loss by far more than the tolerance, so the comparison can tell.
Needs transformers (scripts/setup.sh installs it into build/pyenv).
usage: check_hf_directory.py TETRA_BINARY
"""
import os
import sys
import tempfile

import torch
import transformers

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "testing"))
from tetra_runs import Checker, rel, train, write_llmc_shard  # noqa: E402

TETRA = sys.argv[1]
SEQ, BATCH, VOCAB = 16, 4, 64
# fp32 on both sides; the sums run in other orders (GEMM blocking, softmax):
# round-off of ~1e-7. A wrong rotation, norm or tensor is off by 1e-3 or more.
RTOL = 1e-5
# transformers' init (std 0.02) makes attention almost uniform, where RoPE
# hardly changes the loss; larger query and key weights make it sharp.
QK_GAIN = 30.0
check = Checker()


def hf_loss(model, samples):
    """Mean token cross-entropy of (B, T + 1) samples: inputs the first T, targets the last T."""
    with torch.no_grad():
        logits = model(samples[:, :-1]).logits.float()
        return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), samples[:, 1:].reshape(-1)).item()


def tetra_train(work, model_dir, steps, export=None):
    sets = [f"init_from={model_dir}", "data.format=LLMC", f"data.path={work}/train.bin",
            f"train.seq_length={SEQ}", f"train.global_batch_size={BATCH}", f"train.micro_batch_size={BATCH}",
            f"train.steps={steps}", "train.threads=1", "optimizer.lr=1e-3", "optimizer.min_lr=1e-3"]
    out = f"{work}/run_{steps}_{'export' if export else 'plain'}"
    os.makedirs(out, exist_ok=True)
    return [m["loss"] for m in train(TETRA, out, 1, sets + ([f"export_path={export}"] if export else []))]


def run_case(name, work, config_kwargs, save_kwargs, dtype=torch.float32):
    torch.manual_seed(len(name))
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      max_position_embeddings=256, **config_kwargs)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # sharp attention, so that positions (RoPE) matter to the loss
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(QK_GAIN)
            layer.self_attn.k_proj.weight.mul_(QK_GAIN)
    model = model.to(dtype)
    model_dir = f"{work}/{name}"
    model.save_pretrained(model_dir, safe_serialization=True, **save_kwargs)
    files = sorted(os.listdir(model_dir))
    print(f"{name}: transformers wrote {', '.join(files)}")

    generator = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, VOCAB, (2 * BATCH * SEQ + 1,), generator=generator)
    write_llmc_shard(f"{work}/train.bin", tokens.tolist())
    # Sample i is tokens [i T, i T + T]; step s takes samples (s - 1) B .. s B - 1.
    step_samples = [torch.stack([tokens[i * SEQ:i * SEQ + SEQ + 1] for i in range(s * BATCH, (s + 1) * BATCH)])
                    for s in range(2)]

    # 1. Step-1 loss from the directory alone.
    reference = hf_loss(model.float(), step_samples[0])
    got = tetra_train(work, model_dir, steps=1)[0]
    check(rel(got, reference) <= RTOL,
          f"{name}: tetra's step-1 loss from the directory {got:.9f} vs transformers {reference:.9f}")
    if "rope_scaling" in config_kwargs:
        plain = transformers.LlamaConfig(**{**config.to_dict(), "rope_scaling": None})
        unscaled = transformers.LlamaForCausalLM(plain).eval()
        unscaled.load_state_dict(model.state_dict())
        check(rel(hf_loss(unscaled, step_samples[0]), reference) > 100 * RTOL,
              f"{name}: without rope_scaling transformers' loss differs by more than 100x the tolerance")

    # 2. tetra's export after one step, read back by transformers.
    export = f"{work}/{name}_export"
    tetra_train(work, model_dir, steps=1, export=export)
    two_steps = tetra_train(work, model_dir, steps=2)
    exported = transformers.LlamaForCausalLM.from_pretrained(export, torch_dtype=torch.float32).eval()
    check(exported.config.rope_scaling == config.rope_scaling,
          f"{name}: exported rope_scaling {exported.config.rope_scaling} reads back as {config.rope_scaling}")
    check(exported.config.max_position_embeddings == 256,
          f"{name}: exported max_position_embeddings {exported.config.max_position_embeddings} (the model's, 256)")
    after = hf_loss(exported, step_samples[1])
    check(rel(after, two_steps[1]) <= RTOL,
          f"{name}: transformers' loss of tetra's export {after:.9f} vs tetra's step-2 loss {two_steps[1]:.9f}")


with tempfile.TemporaryDirectory() as tmp:
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 64}
    run_case("gqa_llama3_sharded", tmp, {"num_key_value_heads": 2, "rope_scaling": llama3},
             {"max_shard_size": "20KB"})
    run_case("tied_one_file", tmp, {"tie_word_embeddings": True, "rope_theta": 500000.0}, {})
    run_case("bf16_weights", tmp, {"num_key_value_heads": 1}, {}, dtype=torch.bfloat16)

check.exit("Hugging Face directories train and export as transformers computes them")
