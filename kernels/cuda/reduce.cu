// Elementwise and reduction ops on the device: sums of squares (for the global
// gradient norm: one tensor, or a weighted list in a few launches and one
// wait), scale, add and dtype casts.
#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "core/cuda/stream.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/reduce.h"

namespace tetra::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kPartials = 512;  // blocks of the first pass, fixed for determinism

// partial[block] = sum over the block's grid-stride elements of f(x), fp64.
template <typename T, bool kSquare>
__global__ void PartialSumKernel(const T* x, int64_t n, double* partial) {
  __shared__ double shared[32];
  double sum = 0.0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const double v = ToFloat(x[i]);
    sum += kSquare ? v * v : v;
  }
  sum = BlockSumDouble(sum, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

__global__ void FinalSumKernel(const double* partial, int64_t n, double* total) {
  __shared__ double shared[32];
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += partial[i];
  sum = BlockSumDouble(sum, shared);
  if (threadIdx.x == 0) *total = sum;
}

template <typename T, bool kSquare>
double Reduce(const T* x, int64_t n) {
  if (n == 0) return 0.0;
  // Its own buffer, not Scratch: callers reduce values they keep in Scratch.
  static double* partial =
      static_cast<double*>(AllocateDeviceBuffer((kPartials + 1) * sizeof(double)));
  LaunchKernel(PartialSumKernel<T, kSquare>, kPartials, kThreads, 0, CurrentStream(), x, n,
               partial);
  LaunchKernel(FinalSumKernel, 1, kThreads, 0, CurrentStream(), partial, kPartials,
               partial + kPartials);
  double total = 0.0;
  CopyBytes(&total, partial + kPartials, sizeof(double));
  return total;
}

// A list of fp32 tensors for one launch, a block per chunk of kListChunk
// elements: the multi-tensor ops (the gradient norm's sums of squares,
// clipping's scale) launch once per kMaxListTensors tensors, not once each.
constexpr int64_t kListChunk = 65536;
constexpr int kMaxListTensors = 48;  // per launch: the argument struct stays a few KB

struct TensorList {
  float* x[kMaxListTensors];
  int64_t n[kMaxListTensors];
  double weight[kMaxListTensors];
  int64_t first_chunk[kMaxListTensors + 1];  // prefix sums of chunks per tensor
  int count;
};

// This block's tensor of `list` and the [begin, end) of its chunk there.
struct ListChunk {
  int t;
  int64_t begin, end;
};

__device__ ListChunk BlockChunk(const TensorList& list) {
  int t = 0;
  while (t + 1 < list.count && list.first_chunk[t + 1] <= blockIdx.x) ++t;
  const int64_t begin = (blockIdx.x - list.first_chunk[t]) * kListChunk;
  return {t, begin, min(list.n[t], begin + kListChunk)};
}

// Calls launch(list, blocks) for lists of up to kMaxListTensors of `xs`, in
// order (empty tensors left out), with weights[k] beside xs[k] when given.
template <typename Launch>
void ForEachList(const std::vector<Tensor>& xs, const std::vector<double>* weights, Launch launch) {
  TensorList list = {};
  auto flush = [&] {
    if (list.count > 0) launch(list, list.first_chunk[list.count]);
    list.count = 0;
  };
  for (size_t k = 0; k < xs.size(); ++k) {
    const int64_t n = xs[k].numel();
    if (n == 0) continue;
    const int i = list.count;
    list.x[i] = xs[k].f32();
    list.n[i] = n;
    list.weight[i] = weights != nullptr ? (*weights)[k] : 1.0;
    list.first_chunk[i + 1] = list.first_chunk[i] + CeilDiv(n, kListChunk);
    list.count = i + 1;
    if (list.count == kMaxListTensors) flush();
  }
  flush();
}

// partial[chunk] = weight x the sum of the chunk's squares, fp64; chunks
// numbered from this launch's first.
__global__ void WeightedSquaresKernel(const __grid_constant__ TensorList list, double* partial) {
  __shared__ double shared[32];
  const ListChunk c = BlockChunk(list);
  double sum = 0.0;
  for (int64_t i = c.begin + threadIdx.x; i < c.end; i += blockDim.x) {
    const double v = list.x[c.t][i];
    sum += v * v;
  }
  sum = BlockSumDouble(sum, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = list.weight[c.t] * sum;
}

// Every element of the list times `factor`, as ScaleKernel computes it.
__global__ void ScaleListKernel(const __grid_constant__ TensorList list, float factor) {
  const ListChunk c = BlockChunk(list);
  for (int64_t i = c.begin + threadIdx.x; i < c.end; i += blockDim.x) list.x[c.t][i] *= factor;
}

template <typename T>
__global__ void ScaleKernel(T* x, int64_t n, float factor) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] = FromFloat<T>(ToFloat(x[i]) * factor);
  }
}

template <typename T>
__global__ void AddKernel(const T* x, const T* y, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = FromFloat<T>(ToFloat(x[i]) + ToFloat(y[i]));
  }
}

__global__ void AddF64Kernel(const double* x, const double* y, double* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = x[i] + y[i];
  }
}

template <typename S, typename D>
__global__ void CastKernel(const S* src, D* dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] = FromFloat<D>(ToFloat(src[i]));
  }
}

}  // namespace

double SumToHost(const float* values, int64_t n) { return Reduce<float, false>(values, n); }

double SumOfSquares(const Tensor& x) {
  ExpectDevice(x, "SumOfSquares", "x");
  double result = 0.0;
  DispatchFloat(x.dtype(), "SumOfSquares", [&](auto tag) {
    using T = decltype(tag);
    result = Reduce<T, true>(x.data<T>(), x.numel());
  });
  return result;
}

double WeightedSumOfSquares(const std::vector<Tensor>& xs, const std::vector<double>& weights) {
  int64_t chunks = 0;
  for (const Tensor& x : xs) {
    ExpectDevice(x, "WeightedSumOfSquares", "a tensor");
    chunks += CeilDiv(x.numel(), kListChunk);
  }
  if (chunks == 0) return 0.0;
  // partial (chunks) then the total, in the stream's scratch: its inputs are
  // tensors, never scratch.
  double* partial = static_cast<double*>(Scratch((chunks + 1) * sizeof(double)));
  int64_t launched = 0;  // chunks of the launches so far
  ForEachList(xs, &weights, [&](const TensorList& list, int64_t blocks) {
    LaunchKernel(WeightedSquaresKernel, blocks, kThreads, 0, CurrentStream(), list,
                 partial + launched);
    launched += blocks;
  });
  LaunchKernel(FinalSumKernel, 1, kThreads, 0, CurrentStream(), partial, chunks, partial + chunks);
  double total = 0.0;
  CopyBytes(&total, partial + chunks, sizeof(double));
  return total;
}

void ScaleMultiTensor(const std::vector<Tensor>& xs, float factor) {
  for (const Tensor& x : xs) ExpectDevice(x, "ScaleMultiTensor", "a tensor");
  ForEachList(xs, nullptr, [&](const TensorList& list, int64_t blocks) {
    LaunchKernel(ScaleListKernel, blocks, kThreads, 0, CurrentStream(), list, factor);
  });
}

void Scale(const Tensor& x, float factor) {
  ExpectDevice(x, "Scale", "x");
  const int64_t n = x.numel();
  if (n == 0) return;
  DispatchFloat(x.dtype(), "Scale", [&](auto tag) {
    using T = decltype(tag);
    LaunchKernel(ScaleKernel<T>, GridFor(n, kThreads), kThreads, 0, CurrentStream(), x.data<T>(), n,
                 factor);
  });
}

void Add(const Tensor& x, const Tensor& y, const Tensor& out) {
  ExpectDevice(x, "Add", "x");
  ExpectDevice(y, "Add", "y");
  ExpectDevice(out, "Add", "out");
  const int64_t n = x.numel();
  if (n == 0) return;
  if (x.dtype() == DType::kF64) {
    LaunchKernel(AddF64Kernel, GridFor(n, kThreads), kThreads, 0, CurrentStream(), x.data<double>(),
                 y.data<double>(), out.data<double>(), n);
    return;
  }
  DispatchFloat(x.dtype(), "Add", [&](auto tag) {
    using T = decltype(tag);
    LaunchKernel(AddKernel<T>, GridFor(n, kThreads), kThreads, 0, CurrentStream(), x.data<T>(),
                 y.data<T>(), out.data<T>(), n);
  });
}

void Cast(const Tensor& src, const Tensor& dst) {
  ExpectDevice(src, "Cast", "src");
  ExpectDevice(dst, "Cast", "dst");
  const int64_t n = src.numel();
  if (n == 0) return;
  DispatchFloat(src.dtype(), "Cast", [&](auto src_tag) {
    DispatchFloat(dst.dtype(), "Cast", [&](auto dst_tag) {
      using S = decltype(src_tag);
      using D = decltype(dst_tag);
      LaunchKernel(CastKernel<S, D>, GridFor(n, kThreads), kThreads, 0, CurrentStream(),
                   src.data<S>(), dst.data<D>(), n);
    });
  });
}

}  // namespace tetra::cuda
