// A Llama-style decoder (LlamaForCausalLM): token embedding, N decoder blocks,
// final RMSNorm, LM head (tied to the embedding when tie_word_embeddings) and
// the token cross-entropy. Parameters carry Hugging Face names.
#ifndef TETRA_MODEL_LLAMA_MODEL_H_
#define TETRA_MODEL_LLAMA_MODEL_H_

#include <memory>
#include <vector>

#include "model/decoder_block.h"
#include "model/parameters.h"
#include "model/rmsnorm_layer.h"
#include "proto/config.pb.h"

namespace tetra {

class LlamaModel {
 public:
  // Initialises every parameter from (seed, name, element index).
  LlamaModel(const ModelConfig& config, uint64_t seed);

  // inputs, targets: (B, T) token ids. Returns the sum of the B*T token
  // cross-entropies and accumulates into every parameter gradient the
  // gradient of grad_scale x that sum.
  double ForwardBackward(const int32_t* inputs, const int32_t* targets, int64_t batch,
                         int64_t seq, float grad_scale);
  // The same sum, without gradients.
  double ForwardLoss(const int32_t* inputs, const int32_t* targets, int64_t batch, int64_t seq);

  ParameterStore& parameters() { return store_; }
  const ModelConfig& config() const { return config_; }

 private:
  // Runs everything up to the logits; returns the cross-entropy sum and, when
  // grad_scale != 0, leaves dlogits in logits_.
  double ForwardToLoss(const int32_t* inputs, const int32_t* targets, int64_t batch, int64_t seq,
                       float grad_scale, bool with_grad);

  ModelConfig config_;
  ParameterStore store_;
  Parameter& embed_tokens_;
  std::vector<std::unique_ptr<DecoderBlock>> blocks_;
  std::unique_ptr<RmsNormLayer> final_norm_;
  Parameter* lm_head_;  // &embed_tokens_ when tied
  Tensor tokens_, targets_, hidden_, normed_, logits_, dnormed_;
};

}  // namespace tetra

#endif  // TETRA_MODEL_LLAMA_MODEL_H_
