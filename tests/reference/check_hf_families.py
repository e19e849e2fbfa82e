#!/usr/bin/env python3
"""The Llama family's other classes in and out, against transformers 4.57 itself.

For Qwen2ForCausalLM (q/k/v biases), Qwen3ForCausalLM (per-head q/k RMSNorm,
head_dim apart from hidden_size / heads), MistralForCausalLM (a sliding
window that holds the whole sequence), Qwen3MoeForCausalLM (Qwen3 with
softmax top-k experts, norm_topk_prob, a dense first layer by mlp_only_layers)
and MixtralForCausalLM (Mistral with softmax top-2 experts, renormalised,
named block_sparse_moe.experts.E.w1/w3/w2), transformers' own model (random,
with its biases and norm weights drawn away from their zero and one inits,
so a dropped bias or norm moves the loss) is saved sharded by
save_pretrained, and:
  1. tetra trains from the directory alone on one rank (and with full
     recompute), tp2, pp2 and cp2 (and for the MoE classes ep2 over dp2);
     each step-1 loss equals transformers' loss on the same samples (1e-5
     relative);
     with output_router_logits (qwen3_moe_balanced, Mixtral with
     router_aux_loss_coef 1.0) the objective is transformers' loss with its
     balance loss over all layers' routers, per micro-batch of 2 sequences as
     its gradient accumulation averages them: tetra's loss plus its aux_loss
     equal it, and pipeline parallelism is refused naming the setting (as is
     context parallelism, which splits the tokens the loss sums over);
     and on one rank tetra's step-1 gradient norm equals the norm of
     transformers' gradient of that objective (1e-5 relative: fp32 sums of
     the parameters' squares in other orders), so every gradient, the balance
     loss's through the routers included, is transformers';
  2. tetra's export after one step loads with from_pretrained as the same
     class with no missing or unexpected weights, and its loss on the second
     step's samples equals tetra's step-2 loss (1e-5 relative).
With the emulated GPU's build (second argument), every class also trains on
it (train.device CUDA, fp32: the CUDA kernels, q/k/v biases and q/k norms
included, and cuBLASLt's GEMMs on the emulated device) with transformers'
step-1 loss and gradient norm.
Each case also checks that the feature matters: without the biases, the
norms or the window's class, transformers' loss differs by far more than the
tolerance. The Qwen2 directory also holds a tokenizer (with a chat template)
and a generation_config.json (an eos_token_id list, sampling settings), as a
hub model's does: both the run's export and `tetra checkpoint export` of its
checkpoint carry them, byte for byte, and AutoTokenizer and GenerationConfig
load them from the export.
usage: check_hf_families.py TETRA_BINARY [EMULATED_GPU_TETRA_BINARY]
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import torch
import transformers

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "testing"))
from tetra_runs import ENV, Checker, rel, train, write_llmc_shard  # noqa: E402

TETRA = sys.argv[1]
EMULATED = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] else None
SEQ, BATCH, VOCAB = 16, 4, 64
RTOL = 1e-5  # fp32 on both sides: sums in other orders, ~1e-7
QK_GAIN = 30.0  # sharp attention, so that positions (RoPE) and q/k matter
LOGIT_GAIN = 30.0
check = Checker()

COMMON = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
CASES = {
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM, dict(rope_theta=1000000.0)),
    # head_dim 12, not 32 / 4: the projections are (48, 32) and (24, 32).
    "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM, dict(head_dim=12)),
    # A window of 32 >= SEQ: the same math as full attention on these samples.
    "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM, dict(sliding_window=32)),
    "qwen3_moe": (transformers.Qwen3MoeConfig, transformers.Qwen3MoeForCausalLM,
                  dict(head_dim=12, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24,
                       norm_topk_prob=True, mlp_only_layers=[0])),
    "mixtral": (transformers.MixtralConfig, transformers.MixtralForCausalLM,
                dict(sliding_window=32, num_local_experts=4, num_experts_per_tok=2)),
    "mixtral_balanced": (transformers.MixtralConfig, transformers.MixtralForCausalLM,
                         dict(sliding_window=32, num_local_experts=4, num_experts_per_tok=2,
                              output_router_logits=True, router_aux_loss_coef=1.0)),
}
MOE = ("qwen3_moe", "mixtral", "mixtral_balanced")
MICRO = BATCH // 2  # sequences per micro-batch


def hf_objective(model, samples):
    """transformers' objective of a step: per micro-batch of MICRO sequences the
    mean token cross-entropy, plus router_aux_loss_coef x its balance loss
    where output_router_logits asks for it; averaged over the micro-batches
    (as gradient accumulation averages them)."""
    losses = []
    for chunk in samples.split(MICRO):
        out = model(chunk[:, :-1])
        loss = torch.nn.functional.cross_entropy(out.logits.float().reshape(-1, VOCAB), chunk[:, 1:].reshape(-1))
        if getattr(out, "aux_loss", None) is not None:
            loss = loss + model.config.router_aux_loss_coef * out.aux_loss
        losses.append(loss)
    return sum(losses) / len(losses)


def hf_loss(model, samples):
    with torch.no_grad():
        return hf_objective(model, samples).item()


def hf_grad_norm(model, samples):
    model.zero_grad()
    hf_objective(model, samples).backward()
    norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in model.parameters() if p.grad is not None)).item()
    model.zero_grad()
    return norm


def tetra_metrics(work, model_dir, ranks, layout, steps, export=None, binary=TETRA):
    sets = [f"init_from={model_dir}", "data.format=LLMC", f"data.path={work}/train.bin",
            f"train.seq_length={SEQ}", f"train.global_batch_size={BATCH}", f"train.micro_batch_size={BATCH // 2}",
            f"train.steps={steps}", "train.threads=1", "optimizer.lr=1e-3", "optimizer.min_lr=1e-3"] + layout
    out = f"{work}/run_{len(os.listdir(work))}"
    os.makedirs(out)
    return train(binary, out, ranks, sets + ([f"export_path={export}"] if export else []))


def tetra_losses(work, model_dir, ranks, layout, steps, export=None):
    """The objective of each step: the cross-entropy and any balance loss."""
    return [m["loss"] + m.get("aux_loss", 0) for m in tetra_metrics(work, model_dir, ranks, layout, steps, export)]


def randomise(model):
    """Sharp attention; biases and q/k norm weights away from 0 and 1 (Qwen3's
    norms undo the projections' gain, so their weights carry it)."""
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        # transformers' init (std 0.02) leaves every logit near 0 and the loss
        # near ln(vocab) whatever the layers compute: a larger head lets them count.
        model.lm_head.weight.mul_(LOGIT_GAIN)
        for layer in model.model.layers:
            attn = layer.self_attn
            attn.q_proj.weight.mul_(QK_GAIN)
            attn.k_proj.weight.mul_(QK_GAIN)
            for proj in (attn.q_proj, attn.k_proj, attn.v_proj):
                if proj.bias is not None:
                    proj.bias.copy_(torch.randn(proj.bias.shape, generator=generator))
            for norm in (getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)):
                if norm is not None:
                    norm.weight.copy_(4 * (1 + 0.5 * torch.randn(norm.weight.shape, generator=generator)))
            # Experts whose outputs count, chosen by a decisive router.
            moe = getattr(layer, "block_sparse_moe", getattr(layer, "mlp", None))
            if hasattr(moe, "experts"):
                moe.gate.weight.mul_(10)
                for expert in moe.experts:
                    (expert.w2 if hasattr(expert, "w2") else expert.down_proj).weight.mul_(QK_GAIN)


def without_feature(name, model, config):
    """transformers' model with the class's feature removed, or None."""
    if name == "qwen2":
        plain = transformers.LlamaForCausalLM(transformers.LlamaConfig(**COMMON)).eval()
        plain.load_state_dict(model.state_dict(), strict=False)  # drops the biases
        return plain
    if name == "mixtral_balanced":  # no balance loss
        plain = transformers.MixtralForCausalLM(transformers.MixtralConfig(**{**config.to_dict(),
                                                                              "output_router_logits": False})).eval()
        plain.load_state_dict(model.state_dict())
        return plain
    if name == "qwen3_moe":  # top-k weights not renormalised
        plain = transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(**{**config.to_dict(),
                                                                                 "norm_topk_prob": False})).eval()
        plain.load_state_dict(model.state_dict())
        return plain
    if name == "qwen3":
        plain = transformers.Qwen3ForCausalLM(config).eval()
        state = {k: v for k, v in model.state_dict().items() if "_norm" not in k or "layernorm" in k}
        plain.load_state_dict(state, strict=False)  # q/k norm weights back to ones
        return plain
    return None


TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "generation_config.json"]
CHAT = [{"role": "user", "content": "hello world"}, {"role": "assistant", "content": "the end"}]


def save_tokenizer(model_dir):
    """A word-level tokenizer of VOCAB ids with a chat template, and a
    generation config, saved into model_dir by transformers itself."""
    import tokenizers
    words = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>", "user", "assistant", "hello", "world",
             "the", "end"] + [f"w{i}" for i in range(VOCAB - 10)]
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token="<unk>",
        chat_template="{% for m in messages %}<|im_start|> {{ m['role'] }} {{ m['content'] }} <|im_end|> {% endfor %}")
    tokenizer.save_pretrained(model_dir)
    transformers.GenerationConfig(eos_token_id=[2, 0], pad_token_id=0, do_sample=True, temperature=0.7,
                                  top_p=0.8).save_pretrained(model_dir)
    return tokenizer


def check_tokenizer_travels(name, model_dir, export, tokenizer):
    for file in TOKENIZER_FILES:
        with open(f"{model_dir}/{file}", "rb") as source:
            exported = f"{export}/{file}"
            check(os.path.exists(exported) and open(exported, "rb").read() == source.read(),
                  f"{name}: {export} holds {file} as the model directory does")
    loaded = transformers.AutoTokenizer.from_pretrained(export)
    check(loaded("hello world w3").input_ids == tokenizer("hello world w3").input_ids
          and loaded.apply_chat_template(CHAT) == tokenizer.apply_chat_template(CHAT),
          f"{name}: AutoTokenizer from {os.path.basename(export)} encodes text and chats as the original")
    generation = transformers.GenerationConfig.from_pretrained(export)
    check(generation.eos_token_id == [2, 0] and generation.temperature == 0.7,
          f"{name}: the export's generation config keeps eos_token_id [2, 0] and temperature 0.7 "
          f"({generation.eos_token_id}, {generation.temperature})")


def check_pipeline_refused(work, model_dir):
    """transformers' balance loss sums all layers' routers: one stage must hold them."""
    done = subprocess.run(["mpirun", "--oversubscribe", "-np", "2", TETRA, "train", "--config", "/dev/null",
                           "--set", f"init_from={model_dir}", "--set", "parallel.pipeline=2",
                           "--set", f"train.seq_length={SEQ}", "--set", "train.steps=1"],
                          env=ENV, capture_output=True, text=True, timeout=120)
    check(done.returncode != 0 and "model.moe.router_aux_loss_coef 1 " in done.stderr
          and "parallel.pipeline is 2" in done.stderr,
          f"the balance loss under pipeline 2 is refused naming it ({done.stderr.strip().splitlines()[:1]})")


def check_short_window_refused(work, model_dir):
    """A Mistral window shorter than the sequence is another model: refused at launch."""
    short = f"{work}/mistral_window_8"
    shutil.copytree(model_dir, short)
    with open(f"{short}/config.json") as f:
        config = json.load(f)
    with open(f"{short}/config.json", "w") as f:
        json.dump({**config, "sliding_window": 8}, f)
    done = subprocess.run([TETRA, "train", "--config", "/dev/null", "--set", f"init_from={short}",
                           "--set", f"train.seq_length={SEQ}", "--set", "train.steps=1"],
                          env=ENV, capture_output=True, text=True, timeout=120)
    check(done.returncode != 0 and "model.sliding_window 8 is shorter than train.seq_length 16" in done.stderr,
          f"mistral: a window of 8 under sequences of {SEQ} is refused ({done.stderr.strip().splitlines()[-1:]})")


def run_case(name, work):
    config_class, model_class, extra = CASES[name]
    torch.manual_seed(len(name))
    config = config_class(**COMMON, **extra)
    model = model_class(config).eval()
    randomise(model)
    model_dir = f"{work}/{name}"
    model.save_pretrained(model_dir, safe_serialization=True, max_shard_size="20KB")
    tokenizer = save_tokenizer(model_dir) if name == "qwen2" else None
    with open(f"{model_dir}/config.json") as f:
        saved = json.load(f)
    print(f"{name}: transformers {transformers.__version__} wrote {', '.join(sorted(os.listdir(model_dir)))}; "
          f"config keys {', '.join(sorted(saved))}")

    generator = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, VOCAB, (2 * BATCH * SEQ + 1,), generator=generator)
    write_llmc_shard(f"{work}/train.bin", tokens.tolist())
    step_samples = [torch.stack([tokens[i * SEQ:i * SEQ + SEQ + 1] for i in range(s * BATCH, (s + 1) * BATCH)])
                    for s in range(2)]
    reference = hf_loss(model, step_samples[0])
    if name == "mistral":
        check_short_window_refused(work, model_dir)
    plain = without_feature(name, model, config)
    if plain is not None:
        check(rel(hf_loss(plain, step_samples[0]), reference) > 100 * RTOL,
              f"{name}: without its feature transformers' loss moves by more than 100x the tolerance")

    balanced = name.endswith("_balanced")
    if balanced:
        check_pipeline_refused(work, model_dir)
    layouts = [(1, []), (1, ["train.recompute=FULL"]), (2, ["parallel.tensor=2"])]
    layouts += [] if balanced else [(2, ["parallel.pipeline=2"]), (2, ["parallel.context=2"])]
    for ranks, layout in layouts + ([(2, ["parallel.expert=2"])] if name in MOE else []):
        got = tetra_losses(work, model_dir, ranks, layout, steps=1)[0]
        check(rel(got, reference) <= RTOL,
              f"{name} {layout or 'one rank'}: tetra's step-1 loss {got:.9f} vs transformers {reference:.9f}")
    reference_norm = hf_grad_norm(model, step_samples[0])
    norm = tetra_metrics(work, model_dir, 1, [], steps=1)[0]["grad_norm"]
    check(rel(norm, reference_norm) <= 1e-5,
          f"{name}: tetra's step-1 gradient norm {norm:.9f} vs transformers' {reference_norm:.9f}")
    if EMULATED:
        on_gpu = tetra_metrics(work, model_dir, 1, ["train.device=CUDA", "train.precision=FP32"], steps=1,
                               binary=EMULATED)[0]
        check(rel(on_gpu["loss"] + on_gpu.get("aux_loss", 0), reference) <= RTOL
              and rel(on_gpu["grad_norm"], reference_norm) <= 1e-5,
              f"{name} on the emulated GPU: step-1 loss {on_gpu['loss']:.9f} and gradient norm "
              f"{on_gpu['grad_norm']:.9f} as transformers'")

    export = f"{work}/{name}_export"
    two_steps = tetra_losses(work, model_dir, 1, [], steps=2)
    checkpoints = f"{work}/{name}_checkpoints"
    tetra_losses(work, model_dir, 1, [f"checkpoint.dir={checkpoints}", "checkpoint.interval=1"], steps=1,
                 export=export)
    if tokenizer is not None:
        check_tokenizer_travels(name, model_dir, export, tokenizer)
        from_checkpoint = f"{work}/{name}_checkpoint_export"
        step_dir = [d for d in sorted(os.listdir(checkpoints)) if d.startswith("step")][-1]
        subprocess.run([TETRA, "checkpoint", "export", f"{checkpoints}/{step_dir}", "--out", from_checkpoint],
                       env=ENV, check=True, capture_output=True)
        check_tokenizer_travels(f"{name} checkpoint export", model_dir, from_checkpoint, tokenizer)
    exported, info = model_class.from_pretrained(export, torch_dtype=torch.float32, output_loading_info=True)
    check(type(exported) is model_class, f"{name}: the export loads as {type(exported).__name__}")
    missing = {k: v for k, v in info.items() if v}
    check(not missing, f"{name}: the export loads with no missing or unexpected weights ({missing or 'none'})")
    after = hf_loss(exported.eval(), step_samples[1])
    check(rel(after, two_steps[1]) <= RTOL,
          f"{name}: transformers' loss of tetra's export {after:.9f} vs tetra's step-2 loss {two_steps[1]:.9f}")


with tempfile.TemporaryDirectory() as tmp:
    for case in CASES:
        os.makedirs(f"{tmp}/{case}_runs")
        run_case(case, f"{tmp}/{case}_runs")

check.exit("Qwen2, Qwen3, Mistral, Qwen3Moe and Mixtral directories train and export as transformers computes them")
