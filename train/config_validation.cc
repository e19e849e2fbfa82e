#include "train/config_validation.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "model/model_dims.h"

namespace tetra {
namespace {

absl::Status Invalid(const std::string& what, const std::string& hint) {
  return absl::InvalidArgumentError(absl::StrCat(what, "\nhint: ", hint));
}

absl::Status ValidateModel(const ModelConfig& m) {
  auto positive = [](const std::string& name, double value) -> absl::Status {
    if (value > 0) return absl::OkStatus();
    return Invalid(absl::StrCat("model.", name, " is ", value, " but must be positive"),
                   absl::StrCat("set model.", name, " to a positive value"));
  };
  RETURN_IF_ERROR(positive("vocab_size", m.vocab_size()));
  RETURN_IF_ERROR(positive("hidden_size", m.hidden_size()));
  RETURN_IF_ERROR(positive("num_hidden_layers", m.num_hidden_layers()));
  RETURN_IF_ERROR(positive("num_attention_heads", m.num_attention_heads()));
  RETURN_IF_ERROR(positive("intermediate_size", m.intermediate_size()));
  RETURN_IF_ERROR(positive("rope_theta", m.rope_theta()));
  RETURN_IF_ERROR(positive("rms_norm_eps", m.rms_norm_eps()));
  if (m.hidden_size() % m.num_attention_heads() != 0) {
    return Invalid(absl::StrCat("model.hidden_size ", m.hidden_size(),
                                " is not divisible by model.num_attention_heads ",
                                m.num_attention_heads()),
                   "choose hidden_size = num_attention_heads x head_dim");
  }
  int head_dim = m.hidden_size() / m.num_attention_heads();
  if (head_dim % 2 != 0) {
    return Invalid(absl::StrCat("head_dim ", head_dim, " (hidden_size ", m.hidden_size(), " / ",
                                m.num_attention_heads(), " heads) is odd, but rotary embeddings pair dims"),
                   "choose hidden_size and num_attention_heads so that head_dim is even");
  }
  int kv = KeyValueHeads(m);
  if (kv < 0 || kv > m.num_attention_heads() || m.num_attention_heads() % kv != 0) {
    return Invalid(absl::StrCat("model.num_key_value_heads ", m.num_key_value_heads(),
                                " must divide model.num_attention_heads ", m.num_attention_heads()),
                   "use a divisor of num_attention_heads, or 0 for one KV head per attention head");
  }
  if (m.has_moe() && m.moe().n_routed_experts() > 0) {
    return Invalid("model.moe is set, but mixture-of-experts blocks are not implemented yet",
                   "remove model.moe to train a dense model");
  }
  return absl::OkStatus();
}

absl::Status ValidateTrain(const TrainConfig& t) {
  if (t.steps() <= 0) return Invalid(absl::StrCat("train.steps is ", t.steps(), " but must be positive"), "set train.steps to at least 1");
  if (t.seq_length() <= 0) {
    return Invalid(absl::StrCat("train.seq_length is ", t.seq_length(), " but must be positive"),
                   "set train.seq_length, e.g. 256");
  }
  if (t.micro_batch_size() <= 0 || t.global_batch_size() <= 0) {
    return Invalid(absl::StrCat("train.global_batch_size ", t.global_batch_size(), " and train.micro_batch_size ",
                                t.micro_batch_size(), " must be positive"),
                   "set both to positive sample counts");
  }
  if (t.global_batch_size() % t.micro_batch_size() != 0) {
    return Invalid(absl::StrCat("train.global_batch_size ", t.global_batch_size(),
                                " is not a multiple of train.micro_batch_size ", t.micro_batch_size()),
                   absl::StrCat("set global_batch_size to a multiple of ", t.micro_batch_size(),
                                " (micro-batch x accumulation steps)"));
  }
  if (t.threads() < 0) return Invalid(absl::StrCat("train.threads is ", t.threads()), "use 0 (automatic) or a positive count");
  if (t.device() == Device::CUDA) {
    return Invalid("train.device is CUDA, but this build has no CUDA training path yet",
                   "set train.device to CPU or AUTO");
  }
  if (t.precision() == Precision::BF16) {
    return Invalid("train.precision is BF16, but the CPU path trains in fp32",
                   "set train.precision to FP32 or AUTO");
  }
  return absl::OkStatus();
}

absl::Status ValidateOptimizer(const OptimizerConfig& o, int steps) {
  if (!(o.lr() >= 0) || !(o.min_lr() >= 0)) {
    return Invalid(absl::StrCat("optimizer.lr ", o.lr(), " and optimizer.min_lr ", o.min_lr(), " must be >= 0"),
                   "use a learning rate such as 3e-4");
  }
  if (o.min_lr() > o.lr()) {
    return Invalid(absl::StrCat("optimizer.min_lr ", o.min_lr(), " is above optimizer.lr ", o.lr()),
                   "the cosine schedule decays from lr to min_lr: set min_lr <= lr");
  }
  if (o.warmup_steps() < 0 || o.warmup_steps() > steps) {
    return Invalid(absl::StrCat("optimizer.warmup_steps ", o.warmup_steps(), " is outside [0, train.steps ", steps, "]"),
                   "use fewer warmup steps than training steps");
  }
  for (auto [name, beta] : {std::pair{"beta1", o.beta1()}, std::pair{"beta2", o.beta2()}}) {
    if (!(beta >= 0 && beta < 1)) {
      return Invalid(absl::StrCat("optimizer.", name, " is ", beta, " but must be in [0, 1)"),
                     "typical values are beta1 0.9, beta2 0.95");
    }
  }
  if (!(o.eps() > 0)) return Invalid(absl::StrCat("optimizer.eps is ", o.eps(), " but must be positive"), "use 1e-8");
  if (!(o.weight_decay() >= 0)) return Invalid(absl::StrCat("optimizer.weight_decay is ", o.weight_decay()), "use a value >= 0, e.g. 0.1");
  if (!(o.clip_grad() >= 0)) return Invalid(absl::StrCat("optimizer.clip_grad is ", o.clip_grad()), "use a positive norm, or 0 to disable clipping");
  if (o.zero_stage() != 0) {
    return Invalid(absl::StrCat("optimizer.zero_stage ", o.zero_stage(), " needs the distributed optimizer, not implemented yet"),
                   "set optimizer.zero_stage to 0");
  }
  return absl::OkStatus();
}

absl::Status ValidateData(const DataConfig& d, const ModelConfig& m) {
  if (d.format() == DataConfig::SYNTHETIC) {
    const SyntheticConfig& s = d.synthetic();
    if (s.order() < 1) return Invalid(absl::StrCat("data.synthetic.order is ", s.order()), "use an order >= 1, e.g. 2");
    if (s.branching() < 2 || s.branching() > m.vocab_size()) {
      return Invalid(absl::StrCat("data.synthetic.branching ", s.branching(), " is outside [2, vocab_size ", m.vocab_size(), "]"),
                     "use a small branching factor such as 4");
    }
    if (!(s.concentration() > 0)) return Invalid(absl::StrCat("data.synthetic.concentration is ", s.concentration()), "use a positive value, e.g. 1");
    return absl::OkStatus();
  }
  if (d.path().empty()) {
    return Invalid(absl::StrCat("data.format is ", DataConfig::Format_Name(d.format()), " but data.path is empty"),
                   "set data.path to a token file or a glob of shards");
  }
  return absl::OkStatus();
}

absl::Status ValidateParallel(const ParallelConfig& p, int world_size) {
  for (auto [name, size] : {std::pair{"tensor", p.tensor()}, std::pair{"pipeline", p.pipeline()},
                            std::pair{"expert", p.expert()}, std::pair{"virtual_stages", p.virtual_stages()}}) {
    if (size != 1) {
      return Invalid(absl::StrCat("parallel.", name, " is ", size, ", but only single-rank training is implemented yet"),
                     absl::StrCat("set parallel.", name, " to 1"));
    }
  }
  int data = p.data() == 0 ? world_size : p.data();
  if (data != world_size || world_size != 1) {
    return Invalid(absl::StrCat("parallel.data ", data, " x tensor 1 x pipeline 1 must equal the world size ", world_size,
                                ", and only 1 rank is supported yet"),
                   "launch 1 rank with parallel.data 0 or 1");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateConfig(const TrainerConfig& config, int world_size) {
  RETURN_IF_ERROR(ValidateModel(config.model()));
  RETURN_IF_ERROR(ValidateTrain(config.train()));
  RETURN_IF_ERROR(ValidateOptimizer(config.optimizer(), config.train().steps()));
  RETURN_IF_ERROR(ValidateData(config.data(), config.model()));
  RETURN_IF_ERROR(ValidateParallel(config.parallel(), world_size));
  // Sections whose machinery lands in later milestones: refuse rather than ignore.
  for (auto [field, value] : {std::pair{"checkpoint.dir", config.checkpoint().dir()},
                              std::pair{"log.trace_path", config.log().trace_path()},
                              std::pair{"log.tensorboard_dir", config.log().tensorboard_dir()}}) {
    if (!value.empty()) {
      return Invalid(absl::StrCat(field, " is set to \"", value, "\", but that feature is not implemented yet"),
                     absl::StrCat("remove ", field, " from the config"));
    }
  }
  if (config.log().eval_interval() < 0 || config.log().eval_batches() < 1) {
    return Invalid(absl::StrCat("log.eval_interval ", config.log().eval_interval(), " and log.eval_batches ",
                                config.log().eval_batches(), " must be >= 0 and >= 1"),
                   "evaluate every N steps over M >= 1 global batches, or set eval_interval 0");
  }
  if (!config.data().valid_path().empty() && config.data().format() == DataConfig::SYNTHETIC) {
    return Invalid("data.valid_path is set, but data.format is SYNTHETIC",
                   "validation files need data.format LLMC or MEGATRON");
  }
  if (config.log().eval_interval() > 0 && config.data().valid_path().empty()) {
    return Invalid(absl::StrCat("log.eval_interval is ", config.log().eval_interval(), " but data.valid_path is empty"),
                   "set data.valid_path to held-out token files, or log.eval_interval to 0");
  }
  if (config.log().interval() < 1) {
    return Invalid(absl::StrCat("log.interval is ", config.log().interval(), " but must be >= 1"), "print progress every N >= 1 steps");
  }
  return absl::OkStatus();
}

}  // namespace tetra
