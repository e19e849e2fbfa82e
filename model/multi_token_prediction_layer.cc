#include "model/multi_token_prediction_layer.h"

#include <initializer_list>
#include <string>
#include <vector>

#include "kernels/ops.h"

namespace tetra {
namespace {

std::string DepthPrefix(const ModelConfig& c, int depth) {
  return "model.layers." + std::to_string(c.num_hidden_layers() + depth - 1);
}

}  // namespace

MultiTokenPredictionLayer::MultiTokenPredictionLayer(ParameterStore& store, int depth,
                                                     const ModelConfig& c,
                                                     Parameter& embedding_table,
                                                     Parameter& head_weight,
                                                     const LayerParallelism& parallelism)
    : depth_(depth),
      enorm_(store, DepthPrefix(c, depth) + ".enorm.weight", c.hidden_size(), c.rms_norm_eps(),
             parallelism),
      hnorm_(store, DepthPrefix(c, depth) + ".hnorm.weight", c.hidden_size(), c.rms_norm_eps(),
             parallelism),
      eh_proj_(store.Add(DepthPrefix(c, depth) + ".eh_proj.weight",
                         {c.hidden_size(), 2 * int64_t{c.hidden_size()}}, Init::kNormal,
                         c.initializer_range(), parallelism.Replicated())),
      block_(store, c.num_hidden_layers() + depth - 1, c, parallelism),
      shared_head_norm_(store, DepthPrefix(c, depth) + ".shared_head.norm.weight", c.hidden_size(),
                        c.rms_norm_eps(), parallelism),
      weight_gradients_(store.weight_gradients()),
      embedding_(embedding_table, store.weight_gradients(), parallelism),
      head_(head_weight, store.weight_gradients(), parallelism) {
  // Under sequence parallelism each rank projects its own rows only.
  if (parallelism.sequence_parallel) eh_proj_.grad_partial_over = parallelism.tp;
  for (Layer* sublayer : std::initializer_list<Layer*>{&enorm_, &hnorm_, &block_,
                                                       &shared_head_norm_, &embedding_, &head_}) {
    AddSublayer(*sublayer);
  }
}

const Tensor& MultiTokenPredictionLayer::Forward(int slot, const Tensor& h_prev,
                                                 const int32_t* targets, int64_t batch, int64_t seq,
                                                 float grad_scale, float loss_grad_scale,
                                                 double* loss_sum) {
  Activations& a = slots_.ForForward(slot);
  // Position i embeds token i + k, inputs[i + k] = targets[i + k - 1], and
  // predicts targets[i + k]; past the sequence, token 0 and no target.
  const int64_t n = batch * seq;
  std::vector<int32_t> embedded(n), predicted(n);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < seq; ++i) {
      const int64_t row = b * seq + i, source = i + depth_;
      embedded[row] = source < seq ? targets[row + depth_ - 1] : 0;
      predicted[row] = source < seq ? targets[row + depth_] : kIgnoredTarget;
    }
  }
  CopyTokenIds(embedded.data(), n, &a.tokens);
  CopyTokenIds(predicted.data(), n, &targets_);

  const Tensor& e = enorm_.Forward(slot, embedding_.Forward(slot, a.tokens));
  const Tensor& h = hnorm_.Forward(slot, h_prev);
  const int64_t rows = h.dim(0), hidden = h.dim(1);
  EnsureShape(&a.joined, {rows, 2 * hidden});
  EnsureShape(&a.projected, {rows, hidden});
  ops::ConcatColumns(e, h, a.joined);
  ops::Linear(a.joined, eh_proj_.compute, a.projected);
  const Tensor& out =
      shared_head_norm_.Forward(slot, block_.Forward(slot, a.projected, batch, seq, grad_scale));
  *loss_sum = head_.ForwardLoss(slot, out, targets_, loss_grad_scale, /*with_grad=*/true);
  return out;
}

const Tensor& MultiTokenPredictionLayer::Backward(int slot, const Tensor& d_next) {
  const Activations& a = slots_.ForBackward(slot);
  // h_k feeds this depth's head and the next depth.
  Tensor dout = head_.Backward(slot);
  if (d_next.defined()) ops::Add(d_next, dout);
  const Tensor& dprojected = block_.Backward(slot, shared_head_norm_.Backward(slot, dout));
  EnsureShape(&djoined_, a.joined.shape());
  WeightGradients& w = weight_gradients_;
  w.LinearBackward(w.Keep(dprojected), a.joined, eh_proj_.compute, djoined_, eh_proj_.grad);
  const int64_t hidden = dprojected.dim(1);
  EnsureShape(&dembedded_, {dprojected.dim(0), hidden});
  EnsureShape(&dhidden_, dembedded_.shape());
  ops::SplitColumns(djoined_, dembedded_, dhidden_);
  embedding_.Backward(slot, enorm_.Backward(slot, dembedded_));
  return hnorm_.Backward(slot, dhidden_);
}

}  // namespace tetra
