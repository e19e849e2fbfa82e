// Token embedding on the device: out[i] = table[tokens[i]] (16-byte copies
// where rows allow), over the whole table or over one vocabulary shard of
// it, and the gradient scattered into the fp32 table gradient with atomic
// adds (order-dependent round-off).
#include <cstdio>

#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/vector_access.cuh"

namespace tetra::cuda {
namespace {

constexpr int kThreads = 256;

// Row of token i in the table, or -1 for a token another shard owns. A bad id
// (negative, or outside an unsharded table) is a bug: data loading validates
// ids, so the kernel traps rather than read or write out of bounds.
__device__ __forceinline__ int64_t TableRow(const int32_t* tokens, int64_t i, int64_t begin,
                                            int64_t rows, bool sharded) {
  const int64_t id = tokens[i];
  if (id < 0 || (!sharded && id >= rows)) {
    printf("tetra embedding: token id %lld at %lld outside [0, %lld)\n", static_cast<long long>(id),
           static_cast<long long>(i), static_cast<long long>(rows));
    __trap();
  }
  const int64_t row = id - begin;
  return row >= 0 && row < rows ? row : -1;
}

// One thread per W elements of an output row: W = 1, or a 16-byte vector
// where the row width and both bases allow. Bits are copied, not converted.
template <int W, typename T>
__global__ void LookupKernel(const int32_t* tokens, int64_t n, const T* table, int64_t begin,
                             int64_t rows, bool sharded, int64_t dim, T* out) {
  const int64_t groups = dim / W;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < n * groups;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = idx / groups, j = idx % groups * W;
    const int64_t row = TableRow(tokens, i, begin, rows, sharded);
    T* dst = out + i * dim + j;
    if constexpr (W == 1) {
      *dst = row >= 0 ? table[row * dim + j] : FromFloat<T>(0.0f);
    } else {
      StoreVector(dst, row >= 0 ? LoadVector(table + row * dim + j) : make_uint4(0, 0, 0, 0));
    }
  }
}

template <typename T>
__global__ void ScatterKernel(const int32_t* tokens, int64_t n, const T* dout, int64_t begin,
                              int64_t rows, bool sharded, int64_t dim, float* dtable) {
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < n * dim;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = idx / dim, j = idx % dim;
    const int64_t row = TableRow(tokens, i, begin, rows, sharded);
    if (row >= 0) atomicAdd(dtable + row * dim + j, ToFloat(dout[idx]));
  }
}

// out = table[tokens]; with `sharded`, the table holds ids [vocab_begin,
// vocab_begin + rows) and other ids give zero rows, otherwise an id outside
// the table traps the kernel.
void Lookup(const Tensor& tokens, const Tensor& table, int64_t vocab_begin, bool sharded,
            const Tensor& out) {
  ExpectDevice(tokens, "Embedding", "tokens");
  ExpectDevice(table, "Embedding", "table");
  ExpectDevice(out, "Embedding", "out");
  const int64_t n = tokens.numel(), dim = table.dim(1);
  if (n * dim == 0) return;
  DispatchFloat(table.dtype(), "Embedding", [&](auto tag) {
    using T = decltype(tag);
    constexpr int kW = kVectorWidth<T>;
    auto launch = [&](auto kernel, int width) {
      LaunchKernel(kernel, GridFor(n * dim / width, kThreads), kThreads, 0, CurrentStream(),
                   tokens.data<int32_t>(), n, table.data<T>(), vocab_begin, table.dim(0), sharded,
                   dim, out.data<T>());
    };
    if (dim % kW == 0 && Aligned(table.raw()) && Aligned(out.raw())) {
      launch(LookupKernel<kW, T>, kW);
    } else {
      launch(LookupKernel<1, T>, 1);
    }
  });
}

// dtable[tokens] += dout (fp32 atomic adds), ids as Lookup reads them.
void Scatter(const Tensor& tokens, const Tensor& dout, int64_t vocab_begin, bool sharded,
             const Tensor& dtable) {
  ExpectDevice(tokens, "EmbeddingBackward", "tokens");
  ExpectDevice(dtable, "EmbeddingBackward", "dtable");
  ExpectDevice(dout, "EmbeddingBackward", "dout");
  const int64_t n = tokens.numel(), dim = dtable.dim(1);
  if (n * dim == 0) return;
  DispatchFloat(dout.dtype(), "EmbeddingBackward", [&](auto tag) {
    using T = decltype(tag);
    LaunchKernel(ScatterKernel<T>, GridFor(n * dim, kThreads), kThreads, 0, CurrentStream(),
                 tokens.data<int32_t>(), n, dout.data<T>(), vocab_begin, dtable.dim(0), sharded,
                 dim, dtable.f32());
  });
}

}  // namespace

void Embedding(const Tensor& tokens, const Tensor& table, const Tensor& out) {
  Lookup(tokens, table, 0, /*sharded=*/false, out);
}

void EmbeddingBackward(const Tensor& tokens, const Tensor& dout, const Tensor& dtable) {
  Scatter(tokens, dout, 0, /*sharded=*/false, dtable);
}

void EmbeddingShard(const Tensor& tokens, const Tensor& table, int64_t vocab_begin,
                    const Tensor& out) {
  Lookup(tokens, table, vocab_begin, /*sharded=*/true, out);
}

void EmbeddingShardBackward(const Tensor& tokens, const Tensor& dout, int64_t vocab_begin,
                            const Tensor& dtable) {
  Scatter(tokens, dout, vocab_begin, /*sharded=*/true, dtable);
}

}  // namespace tetra::cuda
