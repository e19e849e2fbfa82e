// Token dispatch of a mixture-of-experts layer on the device, with the CPU
// reference's results (kernels/cpu/moe_dispatch.cc), deterministically.
//
// DispatchOrder is a counting sort of the (token, choice) pairs by expert:
// each thread counts a chunk of pairs per expert, a scan turns the counts
// into every chunk's first row per expert, and the chunks place their pairs
// in pair order. With a capacity, an MSB-first radix select finds, for each
// overflowing expert, the key of its first dropped pair in the CPU's order
// (weight descending, then pair), and the sort runs again on the kept pairs.
// The row moves (gather, combine and its backward) add in fp32 in the CPU's
// order, with no atomics.

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "core/cuda/stream.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_math.cuh"

namespace tetra::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunk = 1024;  // pairs per thread of the counting sort

// Pair p's place in the capacity order as one key, smaller first: higher
// weight first, then the earlier pair (the CPU's stable sort by weight).
// The high half orders floats by value (-0 counts as +0, which it equals),
// the low half is p (below 2^31, so no key is all ones).
__device__ __forceinline__ uint64_t CapacityKey(float weight, int64_t p) {
  const uint32_t bits = __float_as_uint(weight == 0.0f ? 0.0f : weight);
  const uint32_t ascending = (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
  return static_cast<uint64_t>(~ascending) << 32 | static_cast<uint64_t>(p);
}

// Whether pair p of expert e is kept: every pair without bounds, else those
// whose key is below their expert's bound.
__device__ __forceinline__ bool Kept(const float* weights, const uint64_t* bound, int32_t e,
                                     int64_t p) {
  return bound == nullptr || CapacityKey(weights[p], p) < bound[e];
}

// A thread per chunk of kChunk pairs: counts (E, chunks) column c = the kept
// pairs of chunk c of each expert.
__global__ void ChunkCountKernel(const int32_t* expert, const float* weights, const uint64_t* bound,
                                 int64_t pairs, int num_experts, int64_t chunks, int32_t* counts) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= chunks) return;
  for (int e = 0; e < num_experts; ++e) counts[e * chunks + c] = 0;
  const int64_t end = min(pairs, (c + 1) * kChunk);
  for (int64_t p = c * kChunk; p < end; ++p) {
    const auto e = static_cast<int32_t>(CheckedIndex(expert, p, num_experts, "expert"));
    if (Kept(weights, bound, e, p)) ++counts[e * chunks + c];
  }
}

// One block: counts (E, chunks) becomes each chunk's first row within each
// expert; expert_counts (E) = the experts' kept pairs; offsets (E + 1) = the
// experts' first rows, then M.
__global__ void ScanKernel(int32_t* counts, int num_experts, int64_t chunks, int32_t* expert_counts,
                           int32_t* offsets) {
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) {
    int32_t* row = counts + e * chunks;
    int32_t total = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      const int32_t n = row[c];
      row[c] = total;
      total += n;
    }
    expert_counts[e] = total;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  int32_t first = 0;
  for (int e = 0; e < num_experts; ++e) {
    offsets[e] = first;
    first += expert_counts[e];
  }
  offsets[num_experts] = first;
}

// A thread per chunk, after ScanKernel: send_row (pairs) = each kept pair's
// row, in pair order within its expert, -1 for a dropped pair; row_out
// (M) = each row's pair divided by per_row (1: the pair, k: its token).
__global__ void PlaceKernel(const int32_t* expert, const float* weights, const uint64_t* bound,
                            int64_t pairs, int64_t chunks, int32_t* counts, const int32_t* offsets,
                            int per_row, int32_t* send_row, int32_t* row_out) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= chunks) return;
  const int64_t end = min(pairs, (c + 1) * kChunk);
  for (int64_t p = c * kChunk; p < end; ++p) {
    const int32_t e = expert[p];  // checked by ChunkCountKernel
    if (!Kept(weights, bound, e, p)) {
      send_row[p] = -1;
      continue;
    }
    const int32_t row = offsets[e] + counts[e * chunks + c]++;
    send_row[p] = row;
    row_out[row] = static_cast<int32_t>(p / per_row);
  }
}

// A block per expert: bound (E) = the key of rank `capacity` among the
// expert's pairs (row_pair (M) grouped by expert, as offsets and
// expert_counts say), so that its `capacity` best keys lie below it, or all
// ones for an expert within capacity. An MSB-first radix select, a byte of
// the key per pass.
__global__ void CapacityBoundKernel(const int32_t* row_pair, const float* weights,
                                    const int32_t* offsets, const int32_t* expert_counts,
                                    int64_t capacity, uint64_t* bound) {
  __shared__ int32_t histogram[256];
  __shared__ uint64_t prefix;  // the bytes of the wanted key found so far
  __shared__ int64_t rank;     // its rank among the keys that share them
  const int e = blockIdx.x;
  const int32_t count = expert_counts[e];
  if (count <= capacity) {
    if (threadIdx.x == 0) bound[e] = ~uint64_t{0};
    return;
  }
  const int32_t* pair = row_pair + offsets[e];
  if (threadIdx.x == 0) {
    prefix = 0;
    rank = capacity;
  }
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int d = threadIdx.x; d < 256; d += blockDim.x) histogram[d] = 0;
    __syncthreads();
    const uint64_t found = shift == 56 ? 0 : ~uint64_t{0} << (shift + 8);
    for (int32_t i = threadIdx.x; i < count; i += blockDim.x) {
      const uint64_t key = CapacityKey(weights[pair[i]], pair[i]);
      if ((key & found) == prefix) atomicAdd(&histogram[(key >> shift) & 0xff], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int d = 0;
      while (rank >= histogram[d]) rank -= histogram[d++];
      prefix |= static_cast<uint64_t>(d) << shift;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) bound[e] = prefix;
}

// dst (m, c) row i = src row index[i], src having src_rows rows.
template <typename T>
__global__ void GatherRowsKernel(const T* src, int64_t src_rows, const int32_t* index, int64_t m,
                                 int64_t c, T* dst) {
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < m * c;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = idx / c, j = idx % c;
    dst[idx] = src[CheckedIndex(index, i, src_rows, "row") * c + j];
  }
}

// dst (n, c) row t = sum over j < k, in j order, of weights[t k + j] (1 when
// weights is null) x src row index[t k + j], skipping -1 (a dropped pair).
template <typename T>
__global__ void CombineRowsKernel(const T* src, int64_t src_rows, const int32_t* index,
                                  const float* weights, int64_t n, int k, int64_t c, T* dst) {
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < n * c;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = idx / c, i = idx % c;
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) {
      if (index[t * k + j] < 0) continue;
      const float v = ToFloat(src[CheckedIndex(index, t * k + j, src_rows, "row") * c + i]);
      sum += weights == nullptr ? v : weights[t * k + j] * v;
    }
    dst[idx] = FromFloat<T>(sum);
  }
}

// A block per pair q = t k + j: dsrc row index[q] = weights[q] x ddst row t,
// dweights[q] = ddst row t . src row index[q] (0 for a dropped pair).
template <typename T>
__global__ void CombineRowsBackwardKernel(const T* ddst, const T* src, int64_t src_rows,
                                          const int32_t* index, const float* weights, int k,
                                          int64_t c, T* dsrc, float* dweights) {
  __shared__ float shared[32];
  const int64_t q = blockIdx.x, t = q / k;
  if (index[q] < 0) {  // a dropped pair adds nothing, so gets no gradient
    if (threadIdx.x == 0) dweights[q] = 0.0f;
    return;
  }
  const int64_t row = CheckedIndex(index, q, src_rows, "row");
  const float w = weights[q];
  float dot = 0.0f;
  for (int64_t i = threadIdx.x; i < c; i += blockDim.x) {
    const float d = ToFloat(ddst[t * c + i]);
    dot += d * ToFloat(src[row * c + i]);  // read before dsrc, which may be src, is written
    dsrc[row * c + i] = FromFloat<T>(w * d);
  }
  dot = BlockSum(dot, shared);
  if (threadIdx.x == 0) dweights[q] = dot;
}

}  // namespace

int64_t DispatchOrder(const Tensor& expert, const Tensor& weights, int64_t capacity,
                      const Tensor& send_row, const Tensor& send_token,
                      const Tensor& expert_counts) {
  for (const Tensor* t : {&expert, &weights, &send_row, &send_token, &expert_counts}) {
    ExpectDevice(*t, "DispatchOrder", "an operand");
  }
  const int64_t pairs = expert.numel();
  const int num_experts = static_cast<int>(expert_counts.numel());
  if (pairs == 0) {
    ZeroBytes(expert_counts.raw(), expert_counts.nbytes());
    return 0;
  }
  const int k = static_cast<int>(expert.dim(1));
  const int64_t chunks = CeilDiv(pairs, kChunk);
  // Scratch: bound (E) uint64, counts (E, chunks), offsets (E + 1) and, with
  // a capacity, row_pair (pairs) int32.
  const size_t ints = num_experts * chunks + num_experts + 1 + (capacity >= 0 ? pairs : 0);
  uint64_t* bound =
      static_cast<uint64_t*>(Scratch(num_experts * sizeof(uint64_t) + ints * sizeof(int32_t)));
  int32_t* counts = reinterpret_cast<int32_t*>(bound + num_experts);
  int32_t* offsets = counts + num_experts * chunks;
  int32_t* row_pair = offsets + num_experts + 1;
  const unsigned grid = static_cast<unsigned>(CeilDiv(chunks, kThreads));
  // The counting sort of the pairs that `kept_bound` keeps (null: all).
  const auto sort = [&](const uint64_t* kept_bound, int per_row, int32_t* row_out) {
    LaunchKernel(ChunkCountKernel, grid, kThreads, 0, CurrentStream(), expert.data<int32_t>(),
                 weights.f32(), kept_bound, pairs, num_experts, chunks, counts);
    LaunchKernel(ScanKernel, 1, kThreads, 0, CurrentStream(), counts, num_experts, chunks,
                 expert_counts.data<int32_t>(), offsets);
    LaunchKernel(PlaceKernel, grid, kThreads, 0, CurrentStream(), expert.data<int32_t>(),
                 weights.f32(), kept_bound, pairs, chunks, counts, offsets, per_row,
                 send_row.data<int32_t>(), row_out);
  };
  if (capacity >= 0) {
    // Every pair grouped by expert first, to find each expert's bound.
    sort(nullptr, 1, row_pair);
    LaunchKernel(CapacityBoundKernel, num_experts, kThreads, 0, CurrentStream(), row_pair,
                 weights.f32(), offsets, expert_counts.data<int32_t>(), capacity, bound);
    sort(bound, k, send_token.data<int32_t>());
  } else {
    sort(nullptr, k, send_token.data<int32_t>());
  }
  int32_t rows = 0;
  CopyBytes(&rows, offsets + num_experts, sizeof(int32_t));
  return rows;
}

void GatherRows(const Tensor& src, const Tensor& index, const Tensor& dst) {
  for (const Tensor* t : {&src, &index, &dst}) ExpectDevice(*t, "GatherRows", "an operand");
  const int64_t c = src.dim(-1), m = index.numel();
  if (m * c == 0) return;
  DispatchFloat(src.dtype(), "GatherRows", [&](auto tag) {
    using T = decltype(tag);
    LaunchKernel(GatherRowsKernel<T>, GridFor(m * c, kThreads), kThreads, 0, CurrentStream(),
                 src.data<T>(), src.numel() / c, index.data<int32_t>(), m, c, dst.data<T>());
  });
}

void CombineRows(const Tensor& src, const Tensor& index, const Tensor& weights, const Tensor& dst) {
  for (const Tensor* t : {&src, &index, &dst}) ExpectDevice(*t, "CombineRows", "an operand");
  if (weights.defined()) ExpectDevice(weights, "CombineRows", "weights");
  const int64_t c = dst.dim(-1), n = index.dim(0);
  if (n == 0) return;
  DispatchFloat(src.dtype(), "CombineRows", [&](auto tag) {
    using T = decltype(tag);
    LaunchKernel(CombineRowsKernel<T>, GridFor(n * c, kThreads), kThreads, 0, CurrentStream(),
                 src.data<T>(), src.numel() / c, index.data<int32_t>(),
                 weights.defined() ? weights.f32() : nullptr, n, static_cast<int>(index.dim(1)), c,
                 dst.data<T>());
  });
}

void CombineRowsBackward(const Tensor& ddst, const Tensor& src, const Tensor& index,
                         const Tensor& weights, const Tensor& dsrc, const Tensor& dweights) {
  for (const Tensor* t : {&ddst, &src, &index, &weights, &dsrc, &dweights}) {
    ExpectDevice(*t, "CombineRowsBackward", "an operand");
  }
  const int64_t c = ddst.dim(-1);
  const int64_t pairs = index.numel();
  if (pairs == 0) return;
  DispatchFloat(ddst.dtype(), "CombineRowsBackward", [&](auto tag) {
    using T = decltype(tag);
    LaunchKernel(CombineRowsBackwardKernel<T>, pairs, kThreads, 0, CurrentStream(), ddst.data<T>(),
                 src.data<T>(), src.numel() / c, index.data<int32_t>(), weights.f32(),
                 static_cast<int>(index.dim(1)), c, dsrc.data<T>(), dweights.f32());
  });
}

}  // namespace tetra::cuda
