// The DeepSeek-V3 router on the device, fp32, with the CPU reference's
// arithmetic (kernels/cpu/router.cc): one thread per token runs the CPU's
// loop over the token's experts in the same order, so sums round alike and
// every top-k breaks ties to the lower expert index. The balance loss works
// per sequence in a fixed order and sums in fp64, so it is deterministic.
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "core/cuda/stream.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/op_contracts.h"

namespace tetra::cuda {
namespace {

constexpr int kThreads = 128;
// The most experts of RouterTopK (bit sets in each thread's local memory)
// and SequenceBalanceStats (a count per expert in shared memory).
constexpr int kMaxExperts = ops::kMaxRouterExperts;  // the op API refuses more
// HF's DeepSeek-V3 adds this to the sum of the chosen scores before dividing.
constexpr float kNormEpsilon = 1e-20f;

// A set of indices in [0, kMaxExperts), in a thread's local memory.
struct IndexSet {
  uint32_t words[kMaxExperts / 32];

  __device__ void Clear(int n) {
    for (int w = 0; w < (n + 31) / 32; ++w) words[w] = 0;
  }
  __device__ void Insert(int i) { words[i / 32] |= 1u << (i % 32); }
  __device__ bool Contains(int i) const { return (words[i / 32] >> (i % 32)) & 1u; }
};

// The k largest of value(0), ..., value(n - 1), best first, ties to the lower
// index: emit(j, index) for j < k; `chosen` ends holding them.
template <typename Value, typename Emit>
__device__ void TopK(int n, int k, const Value& value, IndexSet& chosen, const Emit& emit) {
  chosen.Clear(n);
  for (int j = 0; j < k; ++j) {
    int best = -1;
    float best_value = 0.0f;
    for (int i = 0; i < n; ++i) {
      if (chosen.Contains(i)) continue;
      const float v = value(i);
      if (best < 0 || v > best_value) {
        best = i;
        best_value = v;
      }
    }
    chosen.Insert(best);
    emit(j, best);
  }
}

// scores (n, E) = softmax or sigmoid of logits (n, E), a thread per token.
__global__ void ScoresKernel(const float* logits, int64_t n, int e, bool softmax, float* scores) {
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < n;
       t += int64_t{gridDim.x} * blockDim.x) {
    const float* z = logits + t * e;
    float* s = scores + t * e;
    if (softmax) {
      float max = z[0];
      for (int i = 1; i < e; ++i) max = max < z[i] ? z[i] : max;
      float sum = 0.0f;
      for (int i = 0; i < e; ++i) sum += s[i] = expf(z[i] - max);
      for (int i = 0; i < e; ++i) s[i] /= sum;
    } else {
      for (int i = 0; i < e; ++i) s[i] = 1.0f / (1.0f + expf(-z[i]));
    }
  }
}

// expert, weights (n, k) from scores (n, E) and bias (E), a thread per token.
__global__ void TopKKernel(RouterSpec spec, const float* scores, const float* bias, int64_t n,
                           int32_t* expert, float* weights) {
  const int e = spec.num_experts, k = spec.top_k, group_size = e / spec.n_group;
  IndexSet kept_groups, chosen;
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < n;
       t += int64_t{gridDim.x} * blockDim.x) {
    const float* s = scores + t * e;
    if (spec.n_group > 1) {
      // Keep the topk_group groups with the best sums of their top-2 biased scores.
      const auto group_score = [&](int g) {
        float first = -INFINITY, second = -INFINITY;
        for (int i = g * group_size; i < (g + 1) * group_size; ++i) {
          const float v = s[i] + bias[i];
          if (v > first) {
            second = first;
            first = v;
          } else if (v > second) {
            second = v;
          }
        }
        return group_size == 1 ? first : first + second;
      };
      TopK(spec.n_group, spec.topk_group, group_score, kept_groups, [](int, int) {});
    }
    const auto biased = [&](int i) {
      return spec.n_group == 1 || kept_groups.Contains(i / group_size) ? s[i] + bias[i] : -INFINITY;
    };
    int32_t* chosen_expert = expert + t * k;
    float* w = weights + t * k;
    float sum = 0.0f;
    TopK(e, k, biased, chosen, [&](int j, int i) {
      chosen_expert[j] = i;
      sum += w[j] = s[i];
    });
    const float scale =
        spec.routed_scaling_factor / (spec.norm_topk_prob ? sum + kNormEpsilon : 1.0f);
    for (int j = 0; j < k; ++j) w[j] *= scale;
  }
}

// dscores (n, E) += the gradient through the weights given dweights (n, k).
__global__ void WeightsBackwardKernel(RouterSpec spec, const float* scores, const int32_t* expert,
                                      const float* dweights, int64_t n, float* dscores) {
  const int e = spec.num_experts, k = spec.top_k;
  const float a = spec.routed_scaling_factor;
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < n;
       t += int64_t{gridDim.x} * blockDim.x) {
    const float* s = scores + t * e;
    const float* dw = dweights + t * k;
    float* ds = dscores + t * e;
    if (!spec.norm_topk_prob) {
      for (int j = 0; j < k; ++j) ds[CheckedIndex(expert, t * k + j, e, "expert")] += a * dw[j];
      continue;
    }
    // w_j = a s_j / D, D = sum_l s_l + eps: dL/ds_j = a (dw_j - sum_l dw_l s_l / D) / D.
    float d = kNormEpsilon, dot = 0.0f;
    for (int j = 0; j < k; ++j) {
      const float sj = s[CheckedIndex(expert, t * k + j, e, "expert")];
      d += sj, dot += dw[j] * sj;
    }
    for (int j = 0; j < k; ++j) ds[expert[t * k + j]] += a * (dw[j] - dot / d) / d;
  }
}

// dlogits (n, E) = the Jacobian of softmax or sigmoid applied to dscores (n, E).
__global__ void ScoresBackwardKernel(const float* scores, const float* dscores, int64_t n, int e,
                                     bool softmax, float* dlogits) {
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < n;
       t += int64_t{gridDim.x} * blockDim.x) {
    const float* s = scores + t * e;
    const float* ds = dscores + t * e;
    float* dz = dlogits + t * e;
    if (softmax) {
      float dot = 0.0f;
      for (int i = 0; i < e; ++i) dot += ds[i] * s[i];
      for (int i = 0; i < e; ++i) dz[i] = s[i] * (ds[i] - dot);
    } else {
      for (int i = 0; i < e; ++i) dz[i] = ds[i] * s[i] * (1.0f - s[i]);
    }
  }
}

// The balance loss: statistics, then the gradient. score_sum (n) = each
// token's sum of its E scores, in fp64 in expert order.
__global__ void ScoreSumKernel(const float* scores, int64_t n, int e, double* score_sum) {
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < n;
       t += int64_t{gridDim.x} * blockDim.x) {
    double sum = 0.0;
    for (int i = 0; i < e; ++i) sum += scores[t * e + i];
    score_sum[t] = sum;
  }
}

// A block per sequence b of seq tokens here, of whole_seq in all: stats
// (batch, 2E) row b = f then P, f_i = E / (k whole_seq) x the choices of i
// here (added once per choice, as the CPU counts), P_i = sum over the tokens
// in order of s_i / S / whole_seq. Shared memory: E int32 counts.
__global__ void SequenceStatsKernel(const float* scores, const int32_t* expert,
                                    const double* score_sum, int64_t seq, int64_t whole_seq, int e,
                                    int k, double* stats) {
  TETRA_DYNAMIC_SHARED(int32_t, choices);
  const int64_t b = blockIdx.x, first = b * seq;
  for (int i = threadIdx.x; i < e; i += blockDim.x) choices[i] = 0;
  __syncthreads();
  for (int64_t p = first * k + threadIdx.x; p < (first + seq) * k; p += blockDim.x) {
    atomicAdd(&choices[CheckedIndex(expert, p, e, "expert")], 1);  // integer: deterministic
  }
  __syncthreads();
  const double per_choice = double{1.0} * e / (k * whole_seq);
  for (int i = threadIdx.x; i < e; i += blockDim.x) {
    double fi = 0.0, pi = 0.0;
    for (int32_t c = 0; c < choices[i]; ++c) fi += per_choice;
    for (int64_t t = first; t < first + seq; ++t) {
      pi += scores[t * e + i] / score_sum[t] / whole_seq;
    }
    stats[b * 2 * e + i] = fi;
    stats[b * 2 * e + e + i] = pi;
  }
}

// dscores (n, E) += grad_scale x the gradient of sum_i f_i P_i, a thread per
// token, f_i from stats (batch, 2E) row t / seq: d/ds'_{t,i} = g f_i / whole_seq;
// s' = s / S: ds_i = (ds'_i - sum_l ds'_l s'_l) / S.
__global__ void BalanceGradientKernel(const float* scores, const double* score_sum,
                                      const double* stats, int64_t n, int64_t seq,
                                      int64_t whole_seq, int e, float grad_scale, float* dscores) {
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < n;
       t += int64_t{gridDim.x} * blockDim.x) {
    const float* s = scores + t * e;
    const double* fb = stats + t / seq * 2 * e;
    const double sum = score_sum[t];
    float* ds = dscores + t * e;
    double dot = 0.0;
    for (int i = 0; i < e; ++i) dot += grad_scale * fb[i] / whole_seq * s[i] / sum;
    for (int i = 0; i < e; ++i) {
      ds[i] += static_cast<float>((grad_scale * fb[i] / whole_seq - dot) / sum);
    }
  }
}

// loads (E) += the choices (pairs) of each expert.
__global__ void CountLoadsKernel(const int32_t* expert, int64_t pairs, int e, int32_t* loads) {
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < pairs;
       p += int64_t{gridDim.x} * blockDim.x) {
    atomicAdd(&loads[CheckedIndex(expert, p, e, "expert")], 1);  // integer: deterministic
  }
}

// One block: bias (E) += speed x sign(mean load - load).
__global__ void UpdateBiasKernel(const int32_t* loads, int e, double speed, float* bias) {
  __shared__ double mean;
  if (threadIdx.x == 0) {
    double sum = 0.0;
    for (int i = 0; i < e; ++i) sum += loads[i];
    mean = sum / e;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < e; i += blockDim.x) {
    const double gap = mean - static_cast<double>(loads[i]);
    bias[i] += static_cast<float>(speed * ((gap > 0) - (gap < 0)));
  }
}

// The router's scores (or logits) and, when defined, its (n, k) choices on
// the device; the op API has checked their shapes and dtypes.
void ExpectScoresOnDevice(const Tensor& scores, const Tensor& expert, const char* op) {
  ExpectDevice(scores, op, "scores");
  if (expert.defined()) ExpectDevice(expert, op, "expert");
}

}  // namespace

void RouterScores(const RouterSpec& spec, const Tensor& logits, const Tensor& scores) {
  ExpectScoresOnDevice(logits, Tensor(), "RouterScores");
  ExpectDevice(scores, "RouterScores", "scores");
  const int64_t n = logits.dim(0);
  if (n == 0) return;
  LaunchKernel(ScoresKernel, GridFor(n, kThreads), kThreads, 0, CurrentStream(), logits.f32(), n,
               spec.num_experts, spec.softmax, scores.f32());
}

void RouterTopK(const RouterSpec& spec, const Tensor& scores, const Tensor& bias,
                const Tensor& expert, const Tensor& weights) {
  ExpectScoresOnDevice(scores, expert, "RouterTopK");
  ExpectDevice(bias, "RouterTopK", "bias");
  ExpectDevice(weights, "RouterTopK", "weights");
  const int64_t n = scores.dim(0);
  if (n == 0) return;
  LaunchKernel(TopKKernel, GridFor(n, kThreads), kThreads, 0, CurrentStream(), spec, scores.f32(),
               bias.f32(), n, expert.data<int32_t>(), weights.f32());
}

void RouterWeightsBackward(const RouterSpec& spec, const Tensor& scores, const Tensor& expert,
                           const Tensor& dweights, const Tensor& dscores) {
  ExpectScoresOnDevice(scores, expert, "RouterWeightsBackward");
  ExpectDevice(dweights, "RouterWeightsBackward", "dweights");
  ExpectDevice(dscores, "RouterWeightsBackward", "dscores");
  const int64_t n = scores.dim(0);
  if (n == 0) return;
  LaunchKernel(WeightsBackwardKernel, GridFor(n, kThreads), kThreads, 0, CurrentStream(), spec,
               scores.f32(), expert.data<int32_t>(), dweights.f32(), n, dscores.f32());
}

void RouterScoresBackward(const RouterSpec& spec, const Tensor& scores, const Tensor& dscores,
                          const Tensor& dlogits) {
  ExpectScoresOnDevice(scores, Tensor(), "RouterScoresBackward");
  ExpectDevice(dscores, "RouterScoresBackward", "dscores");
  ExpectDevice(dlogits, "RouterScoresBackward", "dlogits");
  const int64_t n = scores.dim(0);
  if (n == 0) return;
  LaunchKernel(ScoresBackwardKernel, GridFor(n, kThreads), kThreads, 0, CurrentStream(),
               scores.f32(), dscores.f32(), n, spec.num_experts, spec.softmax, dlogits.f32());
}

void SequenceBalanceStats(const RouterSpec& spec, const Tensor& scores, const Tensor& expert,
                          int64_t batch, int64_t seq, int64_t whole_seq, const Tensor& stats) {
  const int e = spec.num_experts;
  ExpectScoresOnDevice(scores, expert, "SequenceBalanceStats");
  ExpectDevice(stats, "SequenceBalanceStats", "stats");
  if (batch == 0) return;
  const int64_t n = scores.dim(0);
  // Scratch: score_sum (n) fp64; without tokens, none (the stats are zeros).
  double* score_sum = nullptr;
  if (n > 0) {
    score_sum = static_cast<double*>(Scratch(n * sizeof(double)));
    LaunchKernel(ScoreSumKernel, GridFor(n, kThreads), kThreads, 0, CurrentStream(), scores.f32(),
                 n, e, score_sum);
  }
  LaunchKernel(SequenceStatsKernel, batch, kThreads, e * sizeof(int32_t), CurrentStream(),
               scores.f32(), expert.data<int32_t>(), score_sum, seq, whole_seq, e, spec.top_k,
               stats.data<double>());
}

double SequenceBalanceLoss(const RouterSpec& spec, const Tensor& scores, const Tensor& stats,
                           int64_t batch, int64_t seq, int64_t whole_seq, float grad_scale,
                           const Tensor& dscores) {
  const int e = spec.num_experts;
  ExpectScoresOnDevice(scores, Tensor(), "SequenceBalanceLoss");
  if (dscores.defined()) ExpectDevice(dscores, "SequenceBalanceLoss", "dscores");
  ExpectDevice(stats, "SequenceBalanceLoss", "stats");
  const int64_t n = scores.dim(0);
  if (dscores.defined() && n > 0) {
    // Scratch: score_sum (n) fp64.
    double* score_sum = static_cast<double*>(Scratch(n * sizeof(double)));
    LaunchKernel(ScoreSumKernel, GridFor(n, kThreads), kThreads, 0, CurrentStream(), scores.f32(),
                 n, e, score_sum);
    LaunchKernel(BalanceGradientKernel, GridFor(n, kThreads), kThreads, 0, CurrentStream(),
                 scores.f32(), score_sum, stats.data<double>(), n, seq, whole_seq, e, grad_scale,
                 dscores.f32());
  }
  if (batch == 0) return 0.0;
  // Summed on the host in the CPU's order: sequence by sequence, expert by expert.
  std::vector<double> host(batch * 2 * e);
  CopyBytes(host.data(), stats.data<double>(), host.size() * sizeof(double));
  double total = 0.0;
  for (int64_t b = 0; b < batch; ++b) {
    const double* f = host.data() + b * 2 * e;
    const double* p = f + e;
    for (int i = 0; i < e; ++i) total += f[i] * p[i];
  }
  return total;
}

void CountExpertLoads(const RouterSpec& spec, const Tensor& expert, const Tensor& loads) {
  ExpectDevice(expert, "CountExpertLoads", "expert");
  ExpectDevice(loads, "CountExpertLoads", "loads");
  const int64_t pairs = expert.numel();
  if (pairs == 0) return;
  LaunchKernel(CountLoadsKernel, GridFor(pairs, kThreads), kThreads, 0, CurrentStream(),
               expert.data<int32_t>(), pairs, spec.num_experts, loads.data<int32_t>());
}

void UpdateRouterBias(const Tensor& loads, double speed, const Tensor& bias) {
  ExpectDevice(loads, "UpdateRouterBias", "loads");
  ExpectDevice(bias, "UpdateRouterBias", "bias");
  const int e = static_cast<int>(bias.numel());
  if (e == 0) return;
  LaunchKernel(UpdateBiasKernel, 1, kThreads, 0, CurrentStream(), loads.data<int32_t>(), e, speed,
               bias.f32());
}

}  // namespace tetra::cuda
