// Softmax cross-entropy over the vocabulary fused with its gradient, one
// block per row: the row's max and exp-sum come from one online pass in fp32
// registers, the gradient overwrites the logits (or goes to dlogits), and no
// fp32 probabilities are stored. The caller bounds the rows per call (the LM
// head's chunk), so full-batch fp32 logits never exist.
#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/reduce.h"

namespace tetra::cuda {
namespace {

constexpr int kThreads = 512;

// row_loss (rows) = max - x[target] + log(sum exp(x - max)); dlogits, when
// not null, = grad_scale * (softmax - onehot), possibly in place.
template <typename T>
__global__ void CrossEntropyKernel(const T* logits, const int32_t* targets, int64_t vocab,
                                   float grad_scale, T* dlogits, float* row_loss) {
  __shared__ float shared[32];
  const T* x = logits + blockIdx.x * vocab;
  const int32_t target = targets[blockIdx.x];
  if (target < 0 || target >= vocab) {
    printf("tetra cross-entropy: target %d of row %d outside [0, %lld)\n", target,
           static_cast<int>(blockIdx.x), static_cast<long long>(vocab));
    __trap();
  }
  // Online max and sum of this thread's elements, then merged over the block.
  float max = -INFINITY, sum = 0.0f;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float v = ToFloat(x[j]);
    if (v > max) {
      sum = sum * expf(max - v) + 1.0f;
      max = v;
    } else {
      sum += expf(v - max);
    }
  }
  const float target_logit = ToFloat(x[target]);  // read before an in-place gradient
  const float row_max = BlockMax(max, shared);
  sum = BlockSum(max == -INFINITY ? 0.0f : sum * expf(max - row_max), shared);
  if (threadIdx.x == 0) row_loss[blockIdx.x] = (row_max - target_logit) + logf(sum);
  if (dlogits == nullptr) return;
  T* d = dlogits + blockIdx.x * vocab;
  const float scale = grad_scale / sum;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float p = expf(ToFloat(x[j]) - row_max) * scale;
    d[j] = FromFloat<T>(j == target ? p - grad_scale : p);
  }
}

}  // namespace

double CrossEntropy(const Tensor& logits, const Tensor& targets, float grad_scale,
                    const Tensor& dlogits) {
  ExpectDevice(logits, "CrossEntropy", "logits");
  ExpectDevice(targets, "CrossEntropy", "targets");
  if (dlogits.defined()) ExpectDevice(dlogits, "CrossEntropy", "dlogits");
  const int64_t vocab = logits.dim(-1), rows = logits.numel() / vocab;
  TETRA_CHECK(targets.dtype() == DType::kI32 && targets.numel() == rows &&
              (!dlogits.defined() ||
               (dlogits.numel() == logits.numel() && dlogits.dtype() == logits.dtype())))
      << "CrossEntropy: logits " << ShapeString(logits.shape()) << " targets "
      << ShapeString(targets.shape());
  if (rows == 0) return 0.0;
  float* row_loss = static_cast<float*>(Scratch(rows * sizeof(float)));
  DispatchFloat(logits.dtype(), "CrossEntropy", [&](auto tag) {
    using T = decltype(tag);
    CrossEntropyKernel<T><<<rows, kThreads, 0, CurrentStream()>>>(
        logits.data<T>(), targets.data<int32_t>(), vocab, grad_scale,
        dlogits.defined() ? dlogits.data<T>() : nullptr, row_loss);
  });
  TETRA_CUDA_CHECK_LAUNCH();
  return SumToHost(row_loss, rows);
}

}  // namespace tetra::cuda
