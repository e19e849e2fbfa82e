#include "train/config_validation.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/hf_config.h"
#include "core/status_macros.h"
#include "core/user_error.h"
#include "kernels/cpu/threads.h"
#include "model/model_dims.h"
#include "observe/trace_writer.h"
#include "parallel/context_shard.h"
#include "parallel/mesh.h"
#include "pipeline/schedule.h"
#include "pipeline/stage_partition.h"
#include "plan/layout_planner.h"

namespace tetra {
namespace {

// Far above any model trained (DeepSeek-V3: 6.7e11), and low enough that the
// parameter counts (observe/flops.cc) cannot overflow.
constexpr double kMaxParameters = 1e15;
// Multi-token prediction depths: DeepSeek-V3 uses 1; each one is a whole
// decoder block and LM head more.
constexpr int kMaxPredictionDepths = 64;
// The largest head dim of tetra's own CUDA attention kernel
// (kernels/cuda/attention.cu), which fp32 runs use.
constexpr int kMaxFp32AttentionDim = 128;
// Threads per rank beyond this many per core only add contention.
constexpr int kMaxThreadsPerCore = 4;
// The watchdog's deadline: a longer one never fires in practice, which would
// silently turn off docs/architecture.md's "nothing waits forever" (inf and nan did).
constexpr int64_t kMaxCommTimeoutS = 7 * 24 * 3600;  // a week
// Gradient buckets beyond the whole gradient are one bucket; the bound keeps
// the bucket's element count (MiB x 2^18 floats) far inside int64.
constexpr int64_t kMaxBucketMb = int64_t{1} << 20;

absl::Status Invalid(const std::string& what, const std::string& hint) {
  return UserError(what, hint);
}

// `field` (a dotted config path) must be finite and > 0, or >= 0 when zero_ok.
absl::Status CheckNumber(const std::string& field, double value, bool zero_ok,
                         const std::string& example) {
  if (std::isfinite(value) && (value > 0 || (zero_ok && value == 0))) return absl::OkStatus();
  return Invalid(
      absl::StrCat(field, " is ", value, " but must be a finite number ", zero_ok ? ">= 0" : "> 0"),
      absl::StrCat("set ", field, ", e.g. to ", example));
}

// model.moe's counts and numbers: no count negative and every number finite.
absl::Status ValidateMoeNumbers(const MoeConfig& moe) {
  for (const auto& [name, count] :
       {std::pair{"n_routed_experts", moe.n_routed_experts()},
        std::pair{"num_experts_per_tok", moe.num_experts_per_tok()},
        std::pair{"n_shared_experts", moe.n_shared_experts()},
        std::pair{"moe_intermediate_size", moe.moe_intermediate_size()}}) {
    if (count < 0) {
      return Invalid(
          absl::StrCat("model.moe.", name, " is ", count, " but a count cannot be negative"),
          "set it to 0 or more (model.moe.n_routed_experts 0 is a dense model)");
    }
  }
  RETURN_IF_ERROR(CheckNumber("model.moe.n_group", moe.n_group(), false, "8"));
  RETURN_IF_ERROR(CheckNumber("model.moe.topk_group", moe.topk_group(), false, "4"));
  RETURN_IF_ERROR(
      CheckNumber("model.moe.routed_scaling_factor", moe.routed_scaling_factor(), false, "2.5"));
  RETURN_IF_ERROR(CheckNumber("model.moe.aux_loss_alpha", moe.aux_loss_alpha(), true, "0.0001"));
  RETURN_IF_ERROR(
      CheckNumber("model.moe.bias_update_speed", moe.bias_update_speed(), true, "0.001"));
  RETURN_IF_ERROR(
      CheckNumber("model.moe.capacity_factor", moe.capacity_factor(), true, "0 (dropless)"));
  RETURN_IF_ERROR(
      CheckNumber("model.moe.router_aux_loss_coef", moe.router_aux_loss_coef(), true, "0.001"));
  return absl::OkStatus();
}

// The router's kind, its balance loss, and the layers and groups it routes
// over.
absl::Status ValidateMoeRouter(const ModelConfig& m) {
  const MoeConfig& moe = m.moe();
  if (moe.scoring_func() != "sigmoid" && moe.scoring_func() != "softmax") {
    return Invalid(absl::StrCat("model.moe.scoring_func is ", UserText(moe.scoring_func())),
                   "use \"sigmoid\" (DeepSeek-V3) or \"softmax\"");
  }
  if (moe.router_aux_loss_coef() > 0 && moe.scoring_func() != "softmax") {
    return Invalid(
        "model.moe.router_aux_loss_coef is transformers' balance loss of softmax routers (Mixtral, "
        "Qwen3Moe), but model.moe.scoring_func is \"sigmoid\"",
        "use model.moe.aux_loss_alpha, DeepSeek-V3's sequence-wise balance loss, for a sigmoid "
        "router");
  }
  if (moe.first_k_dense_replace() < 0 || moe.first_k_dense_replace() > m.num_hidden_layers()) {
    return Invalid(absl::StrCat("model.moe.first_k_dense_replace ", moe.first_k_dense_replace(),
                                " is outside [0, num_hidden_layers ", m.num_hidden_layers(), "]"),
                   "give the number of leading dense layers");
  }
  if (moe.topk_group() > moe.n_group()) {
    return Invalid(absl::StrCat("model.moe.topk_group ", moe.topk_group(),
                                " exceeds model.moe.n_group ", moe.n_group()),
                   "set topk_group to at most n_group");
  }
  return absl::OkStatus();
}

// With routed experts, the router must have its k experts to choose from.
absl::Status ValidateRoutedExperts(const MoeConfig& moe) {
  const int experts = moe.n_routed_experts(), k = moe.num_experts_per_tok();
  RETURN_IF_ERROR(CheckNumber("model.moe.num_experts_per_tok", k, false, "8"));
  RETURN_IF_ERROR(
      CheckNumber("model.moe.moe_intermediate_size", moe.moe_intermediate_size(), false, "2048"));
  if (k > experts) {
    return Invalid(absl::StrCat("model.moe.num_experts_per_tok ", k,
                                " exceeds model.moe.n_routed_experts ", experts),
                   "choose at most n_routed_experts experts per token");
  }
  if (experts % moe.n_group() != 0) {
    return Invalid(
        absl::StrCat("model.moe.n_group ", moe.n_group(),
                     " does not divide model.moe.n_routed_experts ", experts, " into equal groups"),
        "set n_group to a divisor of n_routed_experts (1 for no group limit)");
  }
  const int candidates = moe.topk_group() * (experts / moe.n_group());  // at most `experts`
  if (k > candidates) {
    return Invalid(absl::StrCat("model.moe.num_experts_per_tok ", k, " exceeds the ", candidates,
                                " candidate experts of topk_group ", moe.topk_group(),
                                " groups of ", experts / moe.n_group()),
                   "raise topk_group or lower num_experts_per_tok");
  }
  // From n_routed_experts / k on, every expert can take every token: no drop.
  if (moe.capacity_factor() > experts) {
    return Invalid(
        absl::StrCat("model.moe.capacity_factor ", moe.capacity_factor(),
                     " is above n_routed_experts ", experts, ", where no expert can ever be full"),
        "use 0 for dropless routing, or a factor such as 1.25");
  }
  return absl::OkStatus();
}

// DeepSeek-V3's mixture-of-experts fields, whenever model.moe is present: no
// count negative and every number finite; with routed experts
// (n_routed_experts > 0) the router must have its k experts to choose from.
absl::Status ValidateMoe(const ModelConfig& m) {
  RETURN_IF_ERROR(ValidateMoeNumbers(m.moe()));
  RETURN_IF_ERROR(ValidateMoeRouter(m));
  if (m.moe().n_routed_experts() == 0) return absl::OkStatus();  // a dense model: nothing is routed
  return ValidateRoutedExperts(m.moe());
}

// YaRN's settings, and the context they stretch: factor x
// original_max_position_embeddings must be max_position_embeddings, where
// transformers' two readings of factor (RopeScalingConfig) agree.
absl::Status ValidateYarn(const ModelConfig& m) {
  const RopeScalingConfig& s = m.rope_scaling();
  if (!std::isfinite(s.factor()) || s.factor() < 1) {
    return Invalid(
        absl::StrCat("model.rope_scaling.factor is ", s.factor(),
                     " but YaRN stretches the context, so it must be a finite number >= 1"),
        "DeepSeek-V3 uses factor 40 with original_max_position_embeddings 4096");
  }
  RETURN_IF_ERROR(CheckNumber("model.rope_scaling.original_max_position_embeddings",
                              s.original_max_position_embeddings(), false, "4096"));
  RETURN_IF_ERROR(CheckNumber("model.rope_scaling.beta_fast", s.beta_fast(), false, "32"));
  RETURN_IF_ERROR(CheckNumber("model.rope_scaling.beta_slow", s.beta_slow(), false, "1"));
  if (s.beta_fast() <= s.beta_slow()) {
    return Invalid(absl::StrCat("model.rope_scaling.beta_fast ", s.beta_fast(),
                                " is not above beta_slow ", s.beta_slow()),
                   "YaRN and DeepSeek-V3 use beta_fast 32 and beta_slow 1");
  }
  RETURN_IF_ERROR(CheckNumber("model.rope_scaling.mscale", s.mscale(), true, "1 (0: absent)"));
  RETURN_IF_ERROR(
      CheckNumber("model.rope_scaling.mscale_all_dim", s.mscale_all_dim(), true, "1 (0: absent)"));
  RETURN_IF_ERROR(CheckNumber("model.rope_scaling.attention_factor", s.attention_factor(), true,
                              "0 (derived from factor and mscale)"));
  const double stretched = s.factor() * s.original_max_position_embeddings();
  if (m.max_position_embeddings() != stretched) {
    const std::string context = absl::StrFormat("%.17g", stretched);  // all digits, no exponent
    return Invalid(
        absl::StrCat("model.max_position_embeddings is ", m.max_position_embeddings(),
                     " but YaRN's factor ", s.factor(), " times original_max_position_embeddings ",
                     s.original_max_position_embeddings(), " is ", context,
                     ", and transformers computes YaRN with their ratio"),
        absl::StrCat("set model.max_position_embeddings to ", context,
                     " (factor x original_max_position_embeddings)"));
  }
  return absl::OkStatus();
}

// rope_scaling as transformers validates it for the types tetra implements.
absl::Status ValidateRopeScaling(const ModelConfig& m) {
  const RopeScalingConfig& s = m.rope_scaling();
  if (s.rope_type().empty() || s.rope_type() == "default") return absl::OkStatus();
  if (s.rope_type() == "yarn") return ValidateYarn(m);
  if (s.rope_type() != "llama3") {
    return Invalid(
        absl::StrCat("model.rope_scaling.rope_type is ", UserText(s.rope_type()),
                     ", which tetra does not implement"),
        "use \"llama3\" (Llama 3.1's scaling), \"yarn\" (DeepSeek-V3's), or \"\" for none");
  }
  RETURN_IF_ERROR(CheckNumber("model.rope_scaling.factor", s.factor(), false, "8"));
  RETURN_IF_ERROR(
      CheckNumber("model.rope_scaling.low_freq_factor", s.low_freq_factor(), false, "1"));
  RETURN_IF_ERROR(
      CheckNumber("model.rope_scaling.high_freq_factor", s.high_freq_factor(), false, "4"));
  RETURN_IF_ERROR(CheckNumber("model.rope_scaling.original_max_position_embeddings",
                              s.original_max_position_embeddings(), false, "8192"));
  if (s.high_freq_factor() <= s.low_freq_factor()) {
    return Invalid(absl::StrCat("model.rope_scaling.high_freq_factor ", s.high_freq_factor(),
                                " is not above low_freq_factor ", s.low_freq_factor()),
                   "Llama 3.1 uses low_freq_factor 1 and high_freq_factor 4");
  }
  return absl::OkStatus();
}

// Multi-head latent attention's sizes (DeepSeek-V3's names), or none of
// them when kv_lora_rank is 0.
absl::Status ValidateMla(const ModelConfig& m) {
  if (m.kv_lora_rank() < 0) {
    return Invalid(
        absl::StrCat("model.kv_lora_rank is ", m.kv_lora_rank(), " but cannot be negative"),
        "set it > 0 (DeepSeek-V3: 512) for multi-head latent attention, or 0 for Llama attention");
  }
  if (!UsesMla(m)) {
    if (m.q_lora_rank() != 0 || m.qk_nope_head_dim() != 0 || m.qk_rope_head_dim() != 0 ||
        m.v_head_dim() != 0) {
      return Invalid(
          "model.q_lora_rank, qk_nope_head_dim, qk_rope_head_dim and v_head_dim are set, but "
          "model.kv_lora_rank is 0, which turns multi-head latent attention off",
          "set model.kv_lora_rank (DeepSeek-V3: 512), or remove the other MLA fields");
    }
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(
      CheckNumber("model.q_lora_rank", m.q_lora_rank(), true, "1536 (0: a plain q_proj)"));
  RETURN_IF_ERROR(CheckNumber("model.qk_nope_head_dim", m.qk_nope_head_dim(), false, "128"));
  RETURN_IF_ERROR(CheckNumber("model.qk_rope_head_dim", m.qk_rope_head_dim(), false, "64"));
  RETURN_IF_ERROR(CheckNumber("model.v_head_dim", m.v_head_dim(), false, "128"));
  if (m.qk_rope_head_dim() % 2 != 0) {
    return Invalid(absl::StrCat("model.qk_rope_head_dim ", m.qk_rope_head_dim(),
                                " is odd, but rotary embeddings rotate pairs of dims"),
                   "use an even number, e.g. 64");
  }
  return absl::OkStatus();
}

// Llama attention's head dim and key-value heads (MLA has its own), and
// the sliding window.
absl::Status ValidateAttentionHeads(const ModelConfig& m) {
  if (m.head_dim() < 0) {
    return Invalid(
        absl::StrCat("model.head_dim is ", m.head_dim(), " but must be >= 0"),
        "give the dims of one attention head, or 0 for hidden_size / num_attention_heads");
  }
  if (!UsesMla(m) && m.head_dim() == 0 && m.hidden_size() % m.num_attention_heads() != 0) {
    return Invalid(
        absl::StrCat("model.hidden_size ", m.hidden_size(),
                     " is not divisible by model.num_attention_heads ", m.num_attention_heads()),
        "choose hidden_size = num_attention_heads x head_dim, or set model.head_dim");
  }
  if (!UsesMla(m) && HeadDim(m) % 2 != 0) {
    return Invalid(
        absl::StrCat("head_dim ", HeadDim(m), " is odd, but rotary embeddings pair dims"),
        "choose model.head_dim (or hidden_size and num_attention_heads) so that head_dim is even");
  }
  if (UsesMla(m) && (m.qkv_bias() || m.qk_norm() || m.head_dim() > 0)) {
    return Invalid(
        "model.qkv_bias, qk_norm and head_dim describe grouped-query attention, but "
        "model.kv_lora_rank > 0 asks for multi-head latent attention",
        "remove them, or set kv_lora_rank to 0");
  }
  if (m.sliding_window() < 0) {
    return Invalid(
        absl::StrCat("model.sliding_window is ", m.sliding_window(), " but must be >= 0"),
        "give the window in tokens, or 0 for none");
  }
  int kv = KeyValueHeads(m);
  if (!UsesMla(m) &&
      (kv < 0 || kv > m.num_attention_heads() || m.num_attention_heads() % kv != 0)) {
    return Invalid(absl::StrCat("model.num_key_value_heads ", m.num_key_value_heads(),
                                " must divide model.num_attention_heads ", m.num_attention_heads()),
                   "use a divisor of num_attention_heads, or 0 for one KV head per attention head");
  }
  return absl::OkStatus();
}

// bos_token_id and eos_token_id: ids of the vocabulary (bos -1: none).
absl::Status ValidateTokenIds(const ModelConfig& m) {
  if (m.bos_token_id() < -1 || m.bos_token_id() >= m.vocab_size()) {
    return Invalid(absl::StrCat("model.bos_token_id ", m.bos_token_id(),
                                " is outside [0, vocab_size ", m.vocab_size(), ")"),
                   "give a token id of the vocabulary, or -1 for none");
  }
  for (int id : m.eos_token_id()) {
    if (id < 0 || id >= m.vocab_size()) {
      return Invalid(absl::StrCat("model.eos_token_id ", id, " is outside [0, vocab_size ",
                                  m.vocab_size(), ")"),
                     "give token ids of the vocabulary");
    }
  }
  return absl::OkStatus();
}

// The planner's count (the embedding and the LM head both counted) must stay
// countable.
absl::Status ValidateParameterCount(const ModelConfig& m) {
  const DeviceParameters whole = ParametersPerDevice(m, PlanLayout{});
  if (whole.dense + whole.expert > kMaxParameters) {
    return Invalid(
        absl::StrCat("the model has ", whole.dense + whole.expert,
                     " parameters (model.hidden_size ", m.hidden_size(), ", num_hidden_layers ",
                     m.num_hidden_layers(), ", intermediate_size ", m.intermediate_size(),
                     ", vocab_size ", m.vocab_size(), "), more than the ", kMaxParameters,
                     " tetra can count"),
        "check the model sizes (DeepSeek-V3 has 6.7e11 parameters)");
  }
  return absl::OkStatus();
}

absl::Status ValidateModel(const ModelConfig& m) {
  RETURN_IF_ERROR(CheckNumber("model.vocab_size", m.vocab_size(), false, "32000"));
  RETURN_IF_ERROR(CheckNumber("model.hidden_size", m.hidden_size(), false, "512"));
  RETURN_IF_ERROR(CheckNumber("model.num_hidden_layers", m.num_hidden_layers(), false, "8"));
  RETURN_IF_ERROR(CheckNumber("model.num_attention_heads", m.num_attention_heads(), false, "8"));
  RETURN_IF_ERROR(CheckNumber("model.intermediate_size", m.intermediate_size(), false, "1536"));
  RETURN_IF_ERROR(CheckNumber("model.rope_theta", m.rope_theta(), false, "10000"));
  RETURN_IF_ERROR(CheckNumber("model.rms_norm_eps", m.rms_norm_eps(), false, "1e-5"));
  RETURN_IF_ERROR(CheckNumber("model.initializer_range", m.initializer_range(), false, "0.02"));
  RETURN_IF_ERROR(CheckNumber("model.make_vocab_size_divisible_by",
                              m.make_vocab_size_divisible_by(), false,
                              "128 (1: no padding beyond a multiple of parallel.tensor)"));
  RETURN_IF_ERROR(ValidateMla(m));
  RETURN_IF_ERROR(ValidateAttentionHeads(m));
  RETURN_IF_ERROR(ValidateRopeScaling(m));
  if (m.max_position_embeddings() < 0) {
    return Invalid(absl::StrCat("model.max_position_embeddings is ", m.max_position_embeddings(),
                                " but must be >= 0"),
                   "give the longest sequence the model is made for, or 0 for train.seq_length");
  }
  RETURN_IF_ERROR(ValidateTokenIds(m));
  if (m.has_moe()) RETURN_IF_ERROR(ValidateMoe(m));
  if (m.num_nextn_predict_layers() < 0 || m.num_nextn_predict_layers() > kMaxPredictionDepths) {
    return Invalid(absl::StrCat("model.num_nextn_predict_layers is ", m.num_nextn_predict_layers(),
                                " but must be in [0, ", kMaxPredictionDepths, "]"),
                   "use 0 (no multi-token prediction) or a few depths (DeepSeek-V3: 1)");
  }
  return ValidateParameterCount(m);
}

// The sample shape: what the layout planner reads of train.
absl::Status ValidateBatch(const TrainConfig& t) {
  if (t.seq_length() <= 0) {
    return Invalid(absl::StrCat("train.seq_length is ", t.seq_length(), " but must be positive"),
                   "set train.seq_length, e.g. 256");
  }
  if (t.micro_batch_size() <= 0 || t.global_batch_size() <= 0) {
    return Invalid(
        absl::StrCat("train.global_batch_size ", t.global_batch_size(),
                     " and train.micro_batch_size ", t.micro_batch_size(), " must be positive"),
        "set both to positive sample counts");
  }
  if (t.global_batch_size() % t.micro_batch_size() != 0) {
    return Invalid(
        absl::StrCat("train.global_batch_size ", t.global_batch_size(),
                     " is not a multiple of train.micro_batch_size ", t.micro_batch_size()),
        BatchSplitHint(t.global_batch_size(), t.micro_batch_size(), 1));
  }
  return absl::OkStatus();
}

// The tokens a run reads, steps x global_batch_size x seq_length + 1 (a
// sample's targets run one token past its inputs); nullopt past int64.
std::optional<int64_t> TokensRead(const TrainConfig& t) {
  int64_t tokens = 0;
  if (__builtin_mul_overflow(int64_t{t.steps()}, int64_t{t.global_batch_size()}, &tokens) ||
      __builtin_mul_overflow(tokens, int64_t{t.seq_length()}, &tokens) ||
      __builtin_add_overflow(tokens, int64_t{1}, &tokens)) {
    return std::nullopt;
  }
  return tokens;
}

absl::Status ValidateTrain(const TrainConfig& t) {
  if (t.steps() <= 0)
    return Invalid(absl::StrCat("train.steps is ", t.steps(), " but must be positive"),
                   "set train.steps to at least 1");
  RETURN_IF_ERROR(ValidateBatch(t));
  if (!TokensRead(t)) {
    return Invalid(
        absl::StrCat("train.steps ", t.steps(), " x global_batch_size ", t.global_batch_size(),
                     " x seq_length ", t.seq_length(), " tokens overflow a 64-bit count"),
        "train fewer steps or smaller batches");
  }
  if (t.recompute_layers() < 0) {
    return Invalid(
        absl::StrCat("train.recompute_layers is ", t.recompute_layers(), " but cannot be negative"),
        "give how many blocks of each model chunk recompute, or 0 for all of them");
  }
  const int cores = cpu::AffinityCores(), most = kMaxThreadsPerCore * cores;
  if (t.threads() < 0 || t.threads() > most) {
    return Invalid(
        absl::StrCat("train.threads is ", t.threads(), " but must be in [0, ", most, "]: at most ",
                     kMaxThreadsPerCore, " x the ", cores, " cores this process may run on"),
        "use 0 (the cores shared evenly by the ranks on this machine) or a positive count up to "
        "the cores");
  }
  return absl::OkStatus();
}

// Every layout, MoE, checkpoints and weight files run on either device;
// only the backend and the build can be wrong.
absl::Status ValidateDevice(const TrainerConfig& c) {
  const TrainConfig& t = c.train();
  if (t.device() != Device::CUDA) {
    if (c.parallel().comm_backend() == CommBackend::NCCL) {
      return Invalid(
          "parallel.comm_backend is NCCL, which moves GPU tensors, but train.device is not CUDA",
          "set parallel.comm_backend to AUTO or MPI, or train.device to CUDA");
    }
    return absl::OkStatus();
  }
#if !TETRA_HAVE_CUDA
  return Invalid("train.device is CUDA, but this build of tetra has no CUDA path",
                 "rebuild where nvcc is found, or set train.device to CPU or AUTO");
#else
  // fp32 attention on the device is tetra's own kernel (cuDNN's fused
  // attention takes bf16), which holds head dims up to kMaxFp32AttentionDim.
  const ModelConfig& m = c.model();
  const int qk_dim = UsesMla(m) ? QkHeadDim(m) : HeadDim(m),
            v_dim = UsesMla(m) ? m.v_head_dim() : qk_dim;
  if (t.precision() == Precision::FP32 && std::max(qk_dim, v_dim) > kMaxFp32AttentionDim) {
    return Invalid(
        absl::StrCat(
            "train.precision is FP32 on CUDA, whose attention kernel takes head dims up to ",
            kMaxFp32AttentionDim, ", but this model's query/key heads have ", qk_dim,
            " dims and its value heads ", v_dim),
        "train in BF16 (cuDNN's fused attention), or on the CPU in FP32");
  }
  return absl::OkStatus();
#endif
}

absl::Status ValidateOptimizer(const OptimizerConfig& o) {
  RETURN_IF_ERROR(CheckNumber("optimizer.lr", o.lr(), true, "3e-4"));
  RETURN_IF_ERROR(CheckNumber("optimizer.min_lr", o.min_lr(), true, "3e-5"));
  RETURN_IF_ERROR(CheckNumber("optimizer.eps", o.eps(), false, "1e-8"));
  RETURN_IF_ERROR(CheckNumber("optimizer.weight_decay", o.weight_decay(), true, "0.1"));
  RETURN_IF_ERROR(
      CheckNumber("optimizer.clip_grad", o.clip_grad(), true, "1.0 (or 0 to disable clipping)"));
  if (o.min_lr() > o.lr()) {
    return Invalid(absl::StrCat("optimizer.min_lr ", o.min_lr(), " is above optimizer.lr ", o.lr()),
                   "the cosine schedule decays from lr to min_lr: set min_lr <= lr");
  }
  // More warmup than steps is a shortened recipe (--set train.steps=3): a warning.
  if (o.warmup_steps() < 0) {
    return Invalid(
        absl::StrCat("optimizer.warmup_steps is ", o.warmup_steps(), " but must be >= 0"),
        "set optimizer.warmup_steps to 0 (no warmup) or a positive step count");
  }
  for (auto [name, beta] : {std::pair{"beta1", o.beta1()}, std::pair{"beta2", o.beta2()}}) {
    if (!(beta >= 0 && beta < 1)) {
      return Invalid(absl::StrCat("optimizer.", name, " is ", beta, " but must be in [0, 1)"),
                     "typical values are beta1 0.9, beta2 0.95");
    }
  }
  if (o.zero_stage() != 0 && o.zero_stage() != 1) {
    return Invalid(absl::StrCat("optimizer.zero_stage is ", o.zero_stage(),
                                ", but only 0 (replicated "
                                "optimizer) and 1 (sharded over data-parallel ranks) exist"),
                   "set optimizer.zero_stage to 0 or 1");
  }
  return absl::OkStatus();
}

absl::Status ValidateSynthetic(const DataConfig& d, const ModelConfig& m, const TrainConfig& t) {
  const SyntheticConfig& s = d.synthetic();
  if (!d.path().empty() || !d.valid_path().empty()) {
    return Invalid(absl::StrCat("data.path ", UserText(d.path()), " / data.valid_path ",
                                UserText(d.valid_path()),
                                " is set, but data.format is SYNTHETIC, which reads no files"),
                   "set data.format to LLMC or MEGATRON to train on token files");
  }
  if (s.order() < 1)
    return Invalid(absl::StrCat("data.synthetic.order is ", s.order()),
                   "use an order >= 1, e.g. 2");
  if (s.branching() < 2 || s.branching() > m.vocab_size()) {
    return Invalid(absl::StrCat("data.synthetic.branching ", s.branching(),
                                " is outside [2, vocab_size ", m.vocab_size(), "]"),
                   "use a small branching factor such as 4");
  }
  RETURN_IF_ERROR(CheckNumber("data.synthetic.concentration", s.concentration(), false, "1.0"));
  // Fresh samples every step: a source that wraps around could be memorised,
  // and then loss_floor would no longer bound the loss.
  const int64_t needed = *TokensRead(t);  // ValidateTrain ruled out overflow
  if (s.num_tokens() < needed) {
    return Invalid(
        absl::StrCat("data.synthetic.num_tokens ", s.num_tokens(), " is less than the ", needed,
                     " tokens that train.steps ", t.steps(), " x global_batch_size ",
                     t.global_batch_size(), " x seq_length ", t.seq_length(), " (+1) read"),
        absl::StrCat("set data.synthetic.num_tokens to at least ", needed));
  }
  return absl::OkStatus();
}

absl::Status ValidateData(const DataConfig& d, const ModelConfig& m, const TrainConfig& t) {
  if (d.format() == DataConfig::SYNTHETIC) return ValidateSynthetic(d, m, t);
  if (d.path().empty()) {
    return Invalid(absl::StrCat("data.format is ", DataConfig::Format_Name(d.format()),
                                " but data.path is empty"),
                   "set data.path to a token file or a glob of shards");
  }
  return absl::OkStatus();
}

// Pipeline parallelism: the stage split and the schedule must exist.
absl::Status ValidatePipeline(const TrainerConfig& c, const MeshShape& s) {
  RETURN_IF_ERROR(PartitionStages(c).status());
  ASSIGN_OR_RETURN(const ScheduleSpec spec, ScheduleSpecFromConfig(c, s.dp));
  // A split backward's W reads the block's activations after other blocks
  // have run; fully recomputed blocks share one set of them.
  if (SplitsBackward(spec.kind) && c.train().recompute() == Recompute::FULL) {
    return Invalid(
        absl::StrCat(
            "parallel.schedule ", ParallelConfig::Schedule_Name(c.parallel().schedule()),
            " splits each backward and runs its weight gradients later, on activations that "
            "train.recompute FULL does not keep"),
        "set train.recompute to SELECTIVE or NONE, or parallel.schedule to ONE_F_ONE_B");
  }
  return absl::OkStatus();
}

// The numbers of `parallel` that are not layout sizes.
absl::Status ValidateParallelNumbers(const ParallelConfig& p) {
  if (!(p.comm_timeout_s() > 0 && p.comm_timeout_s() <= kMaxCommTimeoutS)) {
    return Invalid(
        absl::StrCat(
            "parallel.comm_timeout_s is ", p.comm_timeout_s(), " but must be in (0, ",
            kMaxCommTimeoutS,
            "] seconds (a week), the longest the watchdog lets a "
            "collective wait before it ends the job: without a finite one a stuck rank hangs it"),
        "set parallel.comm_timeout_s to the longest a collective may take, e.g. 600");
  }
  if (!(p.dp_bucket_mb() > 0 && p.dp_bucket_mb() <= kMaxBucketMb)) {
    return Invalid(absl::StrCat("parallel.dp_bucket_mb is ", p.dp_bucket_mb(),
                                " but must be in (0, ", kMaxBucketMb, "] MiB"),
                   "set parallel.dp_bucket_mb to the gradient bucket size, e.g. 25");
  }
  return absl::OkStatus();
}

// transformers' balance loss (model.moe.router_aux_loss_coef) sums every MoE
// layer's router over each micro-batch's tokens: tetra computes it where one
// rank holds all the layers and whole sequences.
absl::Status ValidateRouterBalance(const TrainerConfig& c) {
  const ParallelConfig& p = c.parallel();
  if (c.model().moe().router_aux_loss_coef() == 0 || (p.pipeline() == 1 && p.context() == 1)) {
    return absl::OkStatus();
  }
  return Invalid(
      absl::StrCat(
          "model.moe.router_aux_loss_coef ", c.model().moe().router_aux_loss_coef(),
          " (transformers' balance loss over every MoE layer's router) needs all layers and "
          "whole sequences on each rank, but parallel.pipeline is ",
          p.pipeline(), " and parallel.context is ", p.context()),
      "use tensor, expert and data parallelism with it, or set router_aux_loss_coef 0 and "
      "model.moe.aux_loss_alpha for DeepSeek-V3's sequence-wise balance loss");
}

absl::Status ValidateParallel(const TrainerConfig& c, int world_size) {
  RETURN_IF_ERROR(ValidateRouterBalance(c));
  const ParallelConfig& p = c.parallel();
  ASSIGN_OR_RETURN(Mesh mesh, Mesh::Create(p, world_size));  // layout arithmetic and order string
  const MeshShape& s = mesh.shape();
  const int experts = c.model().has_moe() ? c.model().moe().n_routed_experts() : 0;
  if (experts > 0 && experts % s.ep != 0) {
    return Invalid(absl::StrCat("model.moe.n_routed_experts ", experts,
                                " is not divisible by parallel.expert ", s.ep),
                   "set parallel.expert to a divisor of the number of routed experts");
  }
  if (s.ep > 1 && experts == 0) {
    return Invalid(
        absl::StrCat("parallel.expert is ", s.ep, " but the model has no routed experts"),
        "set model.moe.n_routed_experts, or parallel.expert to 1");
  }
  if (p.virtual_stages() != 1 && s.pp == 1) {
    return Invalid(
        absl::StrCat("parallel.virtual_stages is ", p.virtual_stages(),
                     " but parallel.pipeline is 1: virtual stages interleave a pipeline"),
        "set parallel.pipeline to 2 or more, or parallel.virtual_stages to 1");
  }
  if (s.pp > 1) RETURN_IF_ERROR(ValidatePipeline(c, s));
  if (experts > 0 && s.tp > 1 && p.sequence_parallel()) {
    return Invalid(absl::StrCat("model.moe with parallel.tensor ", s.tp,
                                " and sequence_parallel: MoE layers under sequence parallelism are "
                                "not implemented yet"),
                   "set parallel.sequence_parallel to false for mixture-of-experts models");
  }
  if (experts > 0 && c.model().moe().moe_intermediate_size() % s.tp != 0) {
    return Invalid(
        absl::StrCat("model.moe.moe_intermediate_size ", c.model().moe().moe_intermediate_size(),
                     " is not divisible by parallel.tensor ", s.tp),
        "tensor-parallel experts split their features evenly: use a multiple of the tensor size");
  }
  const TrainConfig& t = c.train();
  if (t.global_batch_size() % (int64_t{t.micro_batch_size()} * s.dp) != 0) {
    return Invalid(
        absl::StrCat("train.global_batch_size ", t.global_batch_size(),
                     " is not a multiple of train.micro_batch_size ", t.micro_batch_size(),
                     " x data-parallel size ", s.dp, " = ", int64_t{t.micro_batch_size()} * s.dp),
        absl::StrCat("each data-parallel rank takes whole micro-batches: ",
                     BatchSplitHint(t.global_batch_size(), t.micro_batch_size(), s.dp)));
  }
  RETURN_IF_ERROR(CheckContextParallel(c, s.cp));
  return ValidateTensorParallel(c.model(), s.tp, p.sequence_parallel(),
                                int64_t{t.micro_batch_size()} * t.seq_length() / s.cp);
}

// The slowest rank's ratio to the median is at least 1, so a threshold at or
// below 1 would name a rank every few steps.
absl::Status ValidateStragglerWarning(const LogConfig& log) {
  const double threshold = log.straggler_threshold();
  if (!(threshold == 0 || (std::isfinite(threshold) && threshold > 1))) {
    return Invalid(absl::StrCat("log.straggler_threshold is ", threshold,
                                " but must be a finite ratio > 1, or 0 (no warning)"),
                   "set log.straggler_threshold, e.g. to 1.3 (a rank 30% slower than the median)");
  }
  if (log.straggler_steps() < 1) {
    return Invalid(
        absl::StrCat("log.straggler_steps is ", log.straggler_steps(), " but must be >= 1"),
        "name a straggler after N >= 1 slow steps in a row, e.g. 5");
  }
  return absl::OkStatus();
}

absl::Status ValidateLog(const LogConfig& log, const CheckpointConfig& checkpoint,
                         const DataConfig& data) {
  if (checkpoint.interval() < 0 || checkpoint.keep() < 0) {
    return Invalid(
        absl::StrCat("checkpoint.interval ", checkpoint.interval(), " and checkpoint.keep ",
                     checkpoint.keep(), " must be >= 0"),
        "save every N steps (0: only at the end and on SIGTERM) and keep the newest K (0: all)");
  }
  if (!checkpoint.local_dir().empty() && checkpoint.dir().empty()) {
    return Invalid("checkpoint.local_dir is set but checkpoint.dir is not",
                   "the copies in memory come between saves to checkpoint.dir: set it too");
  }
  if (!checkpoint.local_dir().empty() && checkpoint.local_interval() < 1) {
    return Invalid(absl::StrCat("checkpoint.local_interval is ", checkpoint.local_interval(),
                                " but must be >= 1 with checkpoint.local_dir set"),
                   "copy the state to memory every N >= 1 steps, e.g. a tenth of "
                   "checkpoint.interval");
  }
  if (checkpoint.local_dir().empty() && checkpoint.local_interval() != 0) {
    return Invalid(absl::StrCat("checkpoint.local_interval is ", checkpoint.local_interval(),
                                " but checkpoint.local_dir is not set"),
                   "set checkpoint.local_dir to node-local memory, e.g. /dev/shm/tetra");
  }
  if (log.eval_interval() < 0 || log.eval_batches() < 1) {
    return Invalid(absl::StrCat("log.eval_interval ", log.eval_interval(), " and log.eval_batches ",
                                log.eval_batches(), " must be >= 0 and >= 1"),
                   "evaluate every N steps over M >= 1 global batches, or set eval_interval 0");
  }
  if (log.eval_interval() > 0 && data.valid_path().empty()) {
    return Invalid(
        absl::StrCat("log.eval_interval is ", log.eval_interval(), " but data.valid_path is empty"),
        "set data.valid_path to held-out token files, or log.eval_interval to 0");
  }
  if (log.interval() < 1) {
    return Invalid(absl::StrCat("log.interval is ", log.interval(), " but must be >= 1"),
                   "print progress every N >= 1 steps");
  }
  RETURN_IF_ERROR(CheckNumber("log.peak_tflops", log.peak_tflops(), true,
                              "989 for an H100 (0: built-in table)"));
  return ValidateStragglerWarning(log);
}

// Multi-token prediction's depths against the sequence, and its loss weight.
absl::Status ValidateMultiTokenPrediction(const ModelConfig& m, const TrainConfig& t) {
  if (m.num_nextn_predict_layers() == 0) return absl::OkStatus();
  RETURN_IF_ERROR(
      CheckNumber("train.mtp_loss_scaling_factor", t.mtp_loss_scaling_factor(), true, "0.1"));
  if (m.num_nextn_predict_layers() >= t.seq_length()) {
    return Invalid(
        absl::StrCat(
            "model.num_nextn_predict_layers ", m.num_nextn_predict_layers(),
            " is not below train.seq_length ", t.seq_length(),
            ": depth k predicts token i + k + 1, so no position of a sequence has a target at "
            "the last depth"),
        "use fewer prediction depths or longer sequences");
  }
  return absl::OkStatus();
}

// tetra's attention is causal over the whole sequence: a sliding window is
// that math only when it holds the whole sequence.
absl::Status ValidateSlidingWindow(const ModelConfig& m, const TrainConfig& t) {
  if (m.sliding_window() == 0 || m.sliding_window() >= t.seq_length()) return absl::OkStatus();
  return Invalid(absl::StrCat("model.sliding_window ", m.sliding_window(),
                              " is shorter than train.seq_length ", t.seq_length(),
                              ", but tetra's attention sees the whole sequence, which that window "
                              "would not"),
                 absl::StrCat("train with train.seq_length <= ", m.sliding_window(),
                              " (the window's math, as transformers computes it)"));
}

}  // namespace

absl::Status ValidateConfig(const TrainerConfig& config, int world_size) {
  RETURN_IF_ERROR(ValidateModel(config.model()));
  RETURN_IF_ERROR(ValidateTrain(config.train()));
  RETURN_IF_ERROR(ValidateMultiTokenPrediction(config.model(), config.train()));
  RETURN_IF_ERROR(ValidateSlidingWindow(config.model(), config.train()));
  RETURN_IF_ERROR(ValidateDevice(config));
  RETURN_IF_ERROR(ValidateOptimizer(config.optimizer()));
  RETURN_IF_ERROR(ValidateData(config.data(), config.model(), config.train()));
  RETURN_IF_ERROR(ValidateParallelNumbers(config.parallel()));
  RETURN_IF_ERROR(ValidateParallel(config, world_size));
  RETURN_IF_ERROR(ValidateLog(config.log(), config.checkpoint(), config.data()));
  RETURN_IF_ERROR(ParseTraceSteps(config.log().trace_steps(), config.train().steps()).status());
  // Said at launch, not after the training the export would end.
  if (!config.export_path().empty()) RETURN_IF_ERROR(CheckHfExportable(config.model()));
  return absl::OkStatus();
}

absl::Status ValidatePlannerInputs(const TrainerConfig& config) {
  RETURN_IF_ERROR(ValidateModel(config.model()));
  RETURN_IF_ERROR(ValidateBatch(config.train()));
  return ValidateParallelNumbers(config.parallel());
}

std::vector<std::string> ConfigWarnings(const TrainerConfig& config) {
  std::vector<std::string> warnings;
  const int warmup = config.optimizer().warmup_steps(), steps = config.train().steps();
  if (warmup > steps) {
    warnings.push_back(absl::StrCat("optimizer.warmup_steps ", warmup, " exceeds train.steps ",
                                    steps, ": the run ends inside the warmup, its last lr ", steps,
                                    "/", warmup, " of optimizer.lr"));
  }
  const int max_positions = config.model().max_position_embeddings();
  if (max_positions > 0 && config.train().seq_length() > max_positions) {
    warnings.push_back(absl::StrCat("train.seq_length ", config.train().seq_length(),
                                    " exceeds the model's max_position_embeddings ", max_positions,
                                    ": positions beyond it were never trained"));
  }
  return warnings;
}

}  // namespace tetra
