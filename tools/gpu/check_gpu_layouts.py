#!/usr/bin/python3
"""The device path against the CPU oracle, on one GPU (run by run_gpu_checks.sh).

layouts: every layout family trains on CUDA in bf16, its ranks sharing the
  GPU through the staged backend (parallel.comm_backend MPI, which keeps
  NCCL's rules), and is compared with the CPU fp32 single-rank run of the
  same model and data: tp 2 with sequence parallelism, pp 2 under 1F1B and
  interleaved (2 virtual stages), dp 2 with ZeRO-1, cp 2 (ring attention),
  and for the MoE model dp 2 x ep 2, cp 2 x ep 2 and tp 2 x pp 2 x dp 2 x ep
  2 on 8 processes. Tolerance: bf16
  activations (2^-8 relative per rounding) move these tiny models' step-1
  loss by ~3e-5, their gradient norm by ~2e-4 and the 8-step curve by ~1e-3
  (measured with this script on CPU ranks, which compute bf16 as the GPU
  does); the bounds leave the GPU's other summation orders (cuBLAS, fused
  attention) 10x more. A message matched to the wrong micro-batch, a
  gradient summed over the wrong group or a token sent to the wrong expert
  moves them by ~1e-1.
checkpoints: a GPU run's checkpoint resumes on the CPU and a CPU run's on
  the GPU; the weights each exports at once equal the saving run's export
  bit for bit (fp32 state moves through page-locked host memory unchanged).

usage: check_gpu_layouts.py TETRA OUT {layouts|checkpoints}
Prints one line per check with the differences; exit status 1 if any failed.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "testing"))
from tetra_runs import Checker, max_abs_difference, read_safetensors, rel, train  # noqa: E402

TETRA, OUT, PART = sys.argv[1], sys.argv[2], sys.argv[3]
COMMON = ["model.vocab_size=64", "model.hidden_size=64", "model.num_hidden_layers=4",
          "model.num_attention_heads=4", "model.num_key_value_heads=2", "model.intermediate_size=128",
          "train.global_batch_size=16", "train.micro_batch_size=2", "train.seq_length=32",
          "train.threads=1", "optimizer.lr=3e-3", "optimizer.warmup_steps=2", "data.synthetic.order=1",
          "log.interval=1000"]
MOE = ["model.moe.n_routed_experts=8", "model.moe.num_experts_per_tok=2", "model.moe.n_shared_experts=1",
       "model.moe.moe_intermediate_size=32", "model.moe.first_k_dense_replace=1", "model.moe.n_group=2",
       "model.moe.topk_group=1", "model.moe.routed_scaling_factor=2.5", "model.moe.aux_loss_alpha=0.01",
       "model.moe.bias_update_speed=0.01"]
STEPS = 8
# Relative: step-1 loss, step-1 gradient norm, every step's loss.
RTOL = (5e-3, 3e-2, 2e-2)
GPU = ["train.device=CUDA", "train.precision=BF16", "parallel.comm_backend=MPI"]
CPU = ["train.device=CPU", "train.precision=FP32"]

check = Checker()


def run(name, ranks, sets):
    out = os.path.join(OUT, name)
    os.makedirs(out, exist_ok=True)
    return train(TETRA, out, ranks, COMMON + sets), out


def layouts():
    dense = [("tp2_sp", 2, ["parallel.tensor=2", "parallel.sequence_parallel=true"]),
             ("pp2_1f1b", 2, ["parallel.pipeline=2"]),
             ("pp2_interleaved", 2, ["parallel.pipeline=2", "parallel.virtual_stages=2"]),
             ("pp2_zb_h1", 2, ["parallel.pipeline=2", "parallel.schedule=ZB_H1"]),
             ("pp2_dualpipe_v", 2, ["parallel.pipeline=2", "parallel.schedule=DUALPIPE_V",
                                    "parallel.virtual_stages=2"]),
             ("dp2_zero1", 2, ["parallel.data=2", "optimizer.zero_stage=1"]),
             ("cp2_ring", 2, ["parallel.context=2"])]
    moe = [("moe_dp2_ep2", 2, ["parallel.expert=2"]),
           ("moe_cp2_ep2", 2, ["parallel.context=2", "parallel.expert=2"]),
           ("moe_pp2_dualpipe_v_ep2", 4, ["parallel.pipeline=2", "parallel.schedule=DUALPIPE_V",
                                          "parallel.virtual_stages=2", "parallel.expert=2"]),
           ("moe_tp2_pp2_dp2_ep2", 8, ["parallel.tensor=2", "parallel.pipeline=2", "parallel.expert=2"])]
    for model, cases in (([], dense), (MOE, moe)):
        ref, _ = run("cpu_ref" + ("_moe" if model else ""), 1, model + CPU + [f"train.steps={STEPS}"])
        for name, ranks, sets in cases:
            got, _ = run(name, ranks, model + GPU + sets + [f"train.steps={STEPS}"])
            loss1, norm1 = rel(got[0]["loss"], ref[0]["loss"]), rel(got[0]["grad_norm"], ref[0]["grad_norm"])
            curve = max(rel(g["loss"], r["loss"]) for g, r in zip(got, ref))
            check(len(got) == STEPS and loss1 <= RTOL[0] and norm1 <= RTOL[1] and curve <= RTOL[2],
                  f"{name} (GPU bf16, {ranks} ranks, staged) vs CPU fp32: step-1 loss {got[0]['loss']:.6f} vs "
                  f"{ref[0]['loss']:.6f} ({loss1:.1e}), grad norm {norm1:.1e}, {STEPS}-step curve {curve:.1e}")


def checkpoints():
    for saver, loader in ((["train.device=CUDA", "train.precision=FP32"], ["train.device=CPU"]),
                          (["train.device=CPU"], ["train.device=CUDA", "train.precision=FP32"])):
        name = f"{saver[0].split('=')[1].lower()}_to_{loader[0].split('=')[1].lower()}"
        ckpt = os.path.join(OUT, name, "ckpt")
        saved_sets = ["train.steps=3", f"checkpoint.dir={ckpt}", "checkpoint.interval=3"]
        _, saved = run(name + "_save", 1, saver + saved_sets + [f"export_path={OUT}/{name}_save/weights"])
        _, loaded = run(name + "_resume", 1, loader + saved_sets + [f"export_path={OUT}/{name}_resume/weights"])
        diff = max_abs_difference(read_safetensors(f"{saved}/weights/model.safetensors"),
                                  read_safetensors(f"{loaded}/weights/model.safetensors"))
        check(diff == 0, f"checkpoint {name}: weights after resuming differ from the saving run's by {diff:g}")


{"layouts": layouts, "checkpoints": checkpoints}[PART]()
check.exit(f"{PART}: all checks passed")
