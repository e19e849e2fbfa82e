// Softmax cross-entropy over the vocabulary on the device, fused with its
// gradient for one rank and split into steps for the vocabulary-parallel
// loss, one block per row, reading rows with 16-byte loads. Both compute the
// CPU reference's row steps (kernels/cpu/cross_entropy.cc): the row max, the
// sum of exp(x - max) in fp64, and the gradient exp(x - max) x
// fp32(grad_scale / sum) - grad_scale x onehot, which may overwrite the
// logits (no probabilities are stored). A row of a padded vocabulary is
// read over its real columns only; its padding columns get gradient 0. The fused kernel reads each
// row twice: once for the max and the sum together (an online sum, rescaled as the max grows), once
// to write the gradient. The rows' statistics go to the host, where the CPU's own code sums the
// rows' losses in row order, so both backends add them alike and the loss is deterministic.
#include <cfloat>
#include <cstdio>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "core/cuda/stream.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/vector_access.cuh"

namespace tetra::cuda {
namespace {

constexpr int kThreads = 512;

// The row steps; every kernel below is made of these, each called by the
// whole block of one row.

// targets[row], which thread 0 checks is below vocab_size (a negative one
// marks an ignored row, kIgnoredTarget): ids are validated when data is
// read, so a bad one is a bug and traps. The other threads only compare it
// with in-range indices.
__device__ __forceinline__ int32_t RowTarget(const int32_t* targets, int64_t row,
                                             int64_t vocab_size) {
  const int32_t target = targets[row];
  if (threadIdx.x == 0 && target >= vocab_size) {
    printf("tetra cross-entropy: target %d of row %lld outside [0, %lld)\n", target,
           static_cast<long long>(row), static_cast<long long>(vocab_size));
    __trap();
  }
  return target;
}

// Each row step below reads its row x (n) with 16-byte loads from x's first
// 16-byte boundary on (a scalar head and tail around them): thread t takes
// the t-th, (t + blockDim)-th, ... item of each part, a fixed order.
template <typename T>
__device__ __forceinline__ VectorSplit RowSplit(const T* x, int64_t n) {
  return SplitForVectors(x, n, /*vectorize=*/true);
}

// The largest of x (n), to every thread; `shared` holds 32 floats.
template <typename T>
__device__ float RowMax(const T* x, int64_t n, float* shared) {
  float max = -INFINITY;
  ForEachPart<T>(RowSplit(x, n), threadIdx.x, blockDim.x, [&](int64_t j, auto width) {
    constexpr int kW = decltype(width)::value;
    float v[kW];
    LoadFloats(x + j, v);
#pragma unroll
    for (int k = 0; k < kW; ++k) max = v[k] > max ? v[k] : max;
  });
  return BlockMax(max, shared);
}

// sum_j exp(x[j] - max) over x (n), each exp in fp32 and summed in fp64, to
// every thread; `shared` holds 32 doubles. Every thread has read its
// elements when it returns (an in-place gradient may follow).
template <typename T>
__device__ double RowSumExp(const T* x, int64_t n, float max, double* shared) {
  double sum = 0.0;
  ForEachPart<T>(RowSplit(x, n), threadIdx.x, blockDim.x, [&](int64_t j, auto width) {
    constexpr int kW = decltype(width)::value;
    float v[kW];
    LoadFloats(x + j, v);
#pragma unroll
    for (int k = 0; k < kW; ++k) sum += expf(v[k] - max);
  });
  return BlockSumDouble(sum, shared);
}

struct MaxSumExp {
  float max;
  double sum;
};

// RowMax and RowSumExp in one read of x (n): each thread keeps the sum of
// exp(x - m) over its elements for its running max m (each exp in fp32,
// summed in fp64), rescaled in fp64 when m grows; the block then rescales
// each thread's sum to the row max and adds them in a fixed order. The sum
// differs from RowSumExp's only by the fp32 rounding of exp(x - m) instead
// of exp(x - max), an ulp per term. m starts at the lowest finite float, so
// a thread with no elements, or only -inf ones, adds exactly 0 (a row of
// only -inf gets max -FLT_MAX and a NaN loss, as the reference's NaN sum
// gives). Every thread has read its elements when it returns.
template <typename T>
__device__ MaxSumExp RowMaxSumExp(const T* x, int64_t n, float* shared, double* shared_double) {
  float max = -FLT_MAX;
  double sum = 0.0;
  ForEachPart<T>(RowSplit(x, n), threadIdx.x, blockDim.x, [&](int64_t j, auto width) {
    constexpr int kW = decltype(width)::value;
    float v[kW];
    LoadFloats(x + j, v);
    float new_max = max;
#pragma unroll
    for (int k = 0; k < kW; ++k) new_max = v[k] > new_max ? v[k] : new_max;
    if (new_max > max) {  // rare after the first few items: the fp64 exp is off the hot path
      sum *= exp(static_cast<double>(max) - new_max);
      max = new_max;
    }
#pragma unroll
    for (int k = 0; k < kW; ++k) sum += expf(v[k] - max);
  });
  const float row_max = BlockMax(max, shared);
  const double scaled = sum * exp(static_cast<double>(max) - row_max);
  return {row_max, BlockSumDouble(scaled, shared_double)};
}

// The softmax's factor grad_scale / sum; 0 on an ignored row (target < 0),
// whose gradient is 0.
__device__ __forceinline__ float GradientScale(float grad_scale, double sum, int32_t target) {
  return target < 0 ? 0.0f : static_cast<float>(grad_scale / sum);
}

// d (width) = exp(x - max) x scale over x's first n (the real columns),
// minus grad_scale at `onehot` (an index outside [0, n): none), and 0 past
// them (padding); d may be x. 16-byte vectors when d and x share their
// alignment (the same split then fits both), else scalar.
template <typename T>
__device__ void RowGradient(const T* x, int64_t n, int64_t width, float max, float scale,
                            int64_t onehot, float grad_scale, T* d) {
  for (int64_t j = n + threadIdx.x; j < width; j += blockDim.x) d[j] = FromFloat<T>(0.0f);
  const VectorSplit split = SplitForVectors(x, n, SameAlignment(x, d));
  ForEachPart<T>(split, threadIdx.x, blockDim.x, [&](int64_t j, auto width) {
    constexpr int kW = decltype(width)::value;
    float v[kW];
    LoadFloats(x + j, v);
#pragma unroll
    for (int k = 0; k < kW; ++k) {
      const float p = expf(v[k] - max) * scale;
      v[k] = j + k == onehot ? p - grad_scale : p;
    }
    StoreFloats(d + j, v);
  });
}

// Per row of logits (rows, width), the first vocab columns real: row_max,
// target_logit, sum_exp (rows); dlogits (rows, width), when not null, = the
// gradient, possibly in place.
template <typename T>
__global__ void CrossEntropyKernel(const T* logits, const int32_t* targets, int64_t width,
                                   int64_t vocab, float grad_scale, T* dlogits, float* row_max,
                                   float* target_logit, double* sum_exp) {
  __shared__ float shared[32];
  __shared__ double shared_double[32];
  const int64_t row = blockIdx.x;
  const T* x = logits + row * width;
  const int32_t target = RowTarget(targets, row, vocab);
  // Read before an in-place gradient overwrites it: no thread writes before
  // the block's reductions in RowMaxSumExp.
  if (threadIdx.x == 0) target_logit[row] = target >= 0 ? ToFloat(x[target]) : 0.0f;
  const MaxSumExp stats = RowMaxSumExp(x, vocab, shared, shared_double);
  if (threadIdx.x == 0) {
    row_max[row] = stats.max;
    sum_exp[row] = stats.sum;
  }
  if (dlogits == nullptr) return;
  RowGradient(x, vocab, width, stats.max, GradientScale(grad_scale, stats.sum, target), target,
              grad_scale, dlogits + row * width);
}

// logits (rows, width) hold ids [vocab_begin, vocab_begin + width), the
// first `real` of them real (cpu::RealColumns) -> row_max, target_logit
// (rows), 0 where another slice holds the target.
template <typename T>
__global__ void RowStatsKernel(const T* logits, const int32_t* targets, int64_t width, int64_t real,
                               int64_t vocab_begin, int64_t vocab_size, float* row_max,
                               float* target_logit) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const T* x = logits + row * width;
  const int64_t local = RowTarget(targets, row, vocab_size) - vocab_begin;
  const float max = RowMax(x, real, shared);
  if (threadIdx.x == 0) {
    row_max[row] = max;
    target_logit[row] = local >= 0 && local < real ? ToFloat(x[local]) : 0.0f;
  }
}

// sum_exp (rows) of the first `real` columns of logits (rows, width) given row_max (rows).
template <typename T>
__global__ void SumExpKernel(const T* logits, const float* row_max, int64_t width, int64_t real,
                             double* sum_exp) {
  __shared__ double shared[32];
  const int64_t row = blockIdx.x;
  const double sum = RowSumExp(logits + row * width, real, row_max[row], shared);
  if (threadIdx.x == 0) sum_exp[row] = sum;
}

// dlogits (rows, width), may be logits, from row_max and sum_exp (rows).
template <typename T>
__global__ void GradientKernel(const T* logits, const int32_t* targets, int64_t width, int64_t real,
                               int64_t vocab_begin, const float* row_max, const double* sum_exp,
                               float grad_scale, T* dlogits) {
  const int64_t row = blockIdx.x;
  const int32_t target = targets[row];
  // An ignored row's onehot index is negative: none.
  RowGradient(logits + row * width, real, width, row_max[row],
              GradientScale(grad_scale, sum_exp[row], target),
              target < 0 ? -1 : target - vocab_begin, grad_scale, dlogits + row * width);
}

// The loss from the rows' targets and statistics (rows each) on the device,
// summed on the host by the CPU reference; waits for the stream.
double LossOnHost(const int32_t* targets, const float* row_max, const float* target_logit,
                  const double* sum_exp, int64_t rows) {
  std::vector<int32_t> ids(rows);
  std::vector<float> max(rows), target(rows);
  std::vector<double> sum(rows);
  CopyBytes(ids.data(), targets, rows * sizeof(int32_t), /*wait=*/false);
  CopyBytes(max.data(), row_max, rows * sizeof(float), /*wait=*/false);
  CopyBytes(target.data(), target_logit, rows * sizeof(float), /*wait=*/false);
  CopyBytes(sum.data(), sum_exp, rows * sizeof(double));  // waits for all four
  return cpu::CrossEntropyLoss(ids.data(), max.data(), target.data(), sum.data(), rows);
}

// Rows of logits (rows, vocab); the op API checked vocab > 0.
int64_t Rows(const Tensor& logits) { return logits.numel() / logits.dim(-1); }

}  // namespace

double CrossEntropy(const Tensor& logits, const Tensor& targets, float grad_scale,
                    const Tensor& dlogits, int64_t vocab_size) {
  ExpectDevice(logits, "CrossEntropy", "logits");
  ExpectDevice(targets, "CrossEntropy", "targets");
  if (dlogits.defined()) ExpectDevice(dlogits, "CrossEntropy", "dlogits");
  const int64_t width = logits.dim(-1), rows = Rows(logits);
  if (rows == 0) return 0.0;
  // Scratch: sum_exp (rows) fp64, then row_max and target_logit (rows) fp32.
  double* sum_exp = static_cast<double*>(Scratch(rows * (sizeof(double) + 2 * sizeof(float))));
  float* row_max = reinterpret_cast<float*>(sum_exp + rows);
  float* target_logit = row_max + rows;
  DispatchFloat(logits.dtype(), "CrossEntropy", [&](auto tag) {
    using T = decltype(tag);
    LaunchKernel(CrossEntropyKernel<T>, rows, kThreads, 0, CurrentStream(), logits.data<T>(),
                 targets.data<int32_t>(), width, vocab_size, grad_scale,
                 dlogits.defined() ? dlogits.data<T>() : nullptr, row_max, target_logit, sum_exp);
  });
  return LossOnHost(targets.data<int32_t>(), row_max, target_logit, sum_exp, rows);
}

void CrossEntropyRowStats(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                          int64_t vocab_size, const Tensor& row_max, const Tensor& target_logit) {
  for (const Tensor* t : {&logits, &targets, &row_max, &target_logit}) {
    ExpectDevice(*t, "CrossEntropyRowStats", "an operand");
  }
  const int64_t width = logits.dim(-1), rows = Rows(logits);
  if (rows == 0) return;
  DispatchFloat(logits.dtype(), "CrossEntropyRowStats", [&](auto tag) {
    using T = decltype(tag);
    LaunchKernel(RowStatsKernel<T>, rows, kThreads, 0, CurrentStream(), logits.data<T>(),
                 targets.data<int32_t>(), width, cpu::RealColumns(width, vocab_begin, vocab_size),
                 vocab_begin, vocab_size, row_max.f32(), target_logit.f32());
  });
}

void CrossEntropySumExp(const Tensor& logits, int64_t vocab_begin, int64_t vocab_size,
                        const Tensor& row_max, const Tensor& sum_exp) {
  for (const Tensor* t : {&logits, &row_max, &sum_exp}) {
    ExpectDevice(*t, "CrossEntropySumExp", "an operand");
  }
  const int64_t width = logits.dim(-1), rows = Rows(logits);
  if (rows == 0) return;
  DispatchFloat(logits.dtype(), "CrossEntropySumExp", [&](auto tag) {
    using T = decltype(tag);
    LaunchKernel(SumExpKernel<T>, rows, kThreads, 0, CurrentStream(), logits.data<T>(),
                 row_max.f32(), width, cpu::RealColumns(width, vocab_begin, vocab_size),
                 sum_exp.data<double>());
  });
}

double CrossEntropyLoss(const Tensor& targets, const Tensor& row_max, const Tensor& target_logit,
                        const Tensor& sum_exp) {
  for (const Tensor* t : {&targets, &row_max, &target_logit, &sum_exp}) {
    ExpectDevice(*t, "CrossEntropyLoss", "an operand");
  }
  const int64_t rows = row_max.numel();
  return LossOnHost(targets.data<int32_t>(), row_max.f32(), target_logit.f32(),
                    sum_exp.data<double>(), rows);
}

void CrossEntropyGradient(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                          int64_t vocab_size, const Tensor& row_max, const Tensor& sum_exp,
                          float grad_scale, const Tensor& dlogits) {
  for (const Tensor* t : {&logits, &targets, &row_max, &sum_exp, &dlogits}) {
    ExpectDevice(*t, "CrossEntropyGradient", "an operand");
  }
  const int64_t width = logits.dim(-1), rows = Rows(logits);
  if (rows == 0) return;
  DispatchFloat(logits.dtype(), "CrossEntropyGradient", [&](auto tag) {
    using T = decltype(tag);
    LaunchKernel(GradientKernel<T>, rows, kThreads, 0, CurrentStream(), logits.data<T>(),
                 targets.data<int32_t>(), width, cpu::RealColumns(width, vocab_begin, vocab_size),
                 vocab_begin, row_max.f32(), sum_exp.data<double>(), grad_scale, dlogits.data<T>());
  });
}

}  // namespace tetra::cuda
