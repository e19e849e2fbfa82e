"""Helpers shared by the scripts that drive the `tetra` binary in tests:
launching a training run (under mpirun for several ranks) and reading its
metrics, writing llm.c token shards, reading safetensors exports, relative
differences, and a checker that prints each result and remembers the
failures. Standard library only, so any Python (build/pyenv's too) imports it.
"""
import json
import os
import struct
import subprocess
import sys

# DeepSeek-V3's architecture in small, as `--set`s over a tiny model's sizes:
# multi-head latent attention (latents 6 and 8, head dims 4 + 4 rotary, 6 for
# values), a dense first layer, then 8 routed experts of width 16 in 2 groups
# (top-1 group, top-2 experts) beside one shared expert, with a balance loss
# and the bias update.
TINY_MLA_MOE = ["model.kv_lora_rank=6", "model.q_lora_rank=8", "model.qk_nope_head_dim=4",
                "model.qk_rope_head_dim=4", "model.v_head_dim=6",
                "model.moe.n_routed_experts=8", "model.moe.num_experts_per_tok=2",
                "model.moe.n_shared_experts=1", "model.moe.moe_intermediate_size=16",
                "model.moe.first_k_dense_replace=1", "model.moe.n_group=2", "model.moe.topk_group=1",
                "model.moe.aux_loss_alpha=0.01", "model.moe.bias_update_speed=0.01"]

# mpirun as root, one OpenMP thread per rank (several ranks share the cores).
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMP_NUM_THREADS="1")


def run_tetra(cmd, ranks=1):
    """Runs `tetra` with arguments `cmd` (a list starting with the binary) on
    `ranks` ranks; exits the test with the output when it fails."""
    if ranks > 1:
        cmd = ["mpirun", "--oversubscribe", "-np", str(ranks)] + cmd
    done = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)}\n{done.stdout}\n{done.stderr}")
    return done


def train(tetra, out, ranks, sets):
    """`tetra train` with every `--set` in `sets`, metrics to out/metrics.jsonl;
    returns the metrics, one dict per step."""
    cmd = [tetra, "train", "--config", "/dev/null"]
    for s in sets + [f"log.metrics_path={out}/metrics.jsonl"]:
        cmd += ["--set", s]
    run_tetra(cmd, ranks)
    return [json.loads(line) for line in open(f"{out}/metrics.jsonl")]


def metrics_so_far(path):
    """The lines of a metrics file a run may still be writing (a line being
    written is left out), [] before it exists."""
    lines = []
    if os.path.exists(path):
        for text in open(path):
            try:
                lines.append(json.loads(text))
            except json.JSONDecodeError:
                pass
    return lines


def write_llmc_shard(path, tokens):
    """An llm.c token shard (magic 20240520, version 1, uint16 tokens)."""
    header = [20240520, 1, len(tokens)] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header) + struct.pack(f"<{len(tokens)}H", *tokens))


def read_safetensors(path):
    """Name -> (dtype, shape, raw bytes) of a safetensors file."""
    data = open(path, "rb").read()
    size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + size])
    header.pop("__metadata__", None)
    body = data[8 + size:]
    return {name: (t["dtype"], t["shape"], body[t["data_offsets"][0]:t["data_offsets"][1]])
            for name, t in header.items()}


def f32_values(tensor):
    """The values of an F32 tensor from read_safetensors."""
    dtype, _, raw = tensor
    assert dtype == "F32", dtype
    return struct.unpack(f"<{len(raw) // 4}f", raw)


def max_abs_difference(a, b):
    """Largest element difference of two exports with the same names and
    shapes (infinity otherwise)."""
    if a.keys() != b.keys() or any(a[k][1] != b[k][1] for k in a):
        return float("inf")
    return max(max(abs(x - y) for x, y in zip(f32_values(a[k]), f32_values(b[k]))) for k in a)


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


def check_bf16_is_used(check, bf16, fp32):
    """The single-rank bf16 run is off the fp32 one by bf16 round-off (measured:
    a few 1e-4 relative): more would be a bug, none would mean no bf16 is used."""
    norm_gap = rel(bf16[0]["grad_norm"], fp32[0]["grad_norm"])
    curve_gap = max(rel(b["loss"], f["loss"]) for b, f in zip(bf16, fp32))
    check(0 < norm_gap <= 1e-2 and 0 < curve_gap <= 1e-2,
          f"single-rank bf16 against fp32: step-1 grad norm {norm_gap:.2e}, loss curve {curve_gap:.2e} "
          "relative (bf16 round-off: above 0, at most 1e-2)")


class Checker:
    """Prints "ok"/"FAIL" per check; exit() fails the test if any failed."""

    def __init__(self):
        self.failures = []

    def __call__(self, ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            self.failures.append(what)

    def exit(self, success_line):
        if self.failures:
            sys.exit(f"{len(self.failures)} checks failed:\n  " + "\n  ".join(self.failures))
        print(success_line)
