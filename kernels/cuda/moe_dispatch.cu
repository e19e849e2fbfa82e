// Token dispatch of a mixture-of-experts layer on the device, with the CPU
// reference's results (kernels/cpu/moe_dispatch.cc), deterministically.
//
// DispatchOrder is a counting sort of the (token, choice) pairs by expert,
// parallel over tiles of pairs: each block counts its tile's pairs per expert,
// a block per expert scans its tiles' counts into each tile's first row, and
// each block places its pairs in pair order (a pair's rank among its expert's
// earlier pairs of the tile, counted in shared memory). With a capacity, an MSB-first radix select
// finds, for each overflowing expert, the key of its first dropped pair in the CPU's order (weight
// descending, then pair), and the sort runs again on the kept pairs. The row moves (gather, combine
// and its backward) add in fp32 in the CPU's order, with no atomics.

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "core/cuda/stream.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_math.cuh"

namespace tetra::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kTile = kThreads;  // pairs per block of the counting sort, one per thread

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

// A block per tile of kTile pairs: counts (E, tiles) column b = the kept
// pairs of tile b of each expert (a shared histogram of E ints).
__global__ void TileCountKernel(const int32_t* expert, const float* weights, const uint64_t* bound,
                                int64_t pairs, int num_experts, int64_t tiles, int32_t* counts) {
  TETRA_DYNAMIC_SHARED(int32_t, histogram);
  const int64_t b = blockIdx.x, p = b * kTile + threadIdx.x;
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) histogram[e] = 0;
  __syncthreads();
  if (p < pairs) {
    const auto e = static_cast<int32_t>(CheckedIndex(expert, p, num_experts, "expert"));
    if (Kept(weights, bound, e, p)) atomicAdd(&histogram[e], 1);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) counts[e * tiles + b] = histogram[e];
}

// A block per expert e: row e of counts (E, tiles) becomes each tile's first
// row within the expert (an exclusive scan, kThreads tiles per pass);
// expert_counts[e] = the expert's kept pairs.
__global__ void ExpertScanKernel(int32_t* counts, int64_t tiles, int32_t* expert_counts) {
  __shared__ int32_t scan[kThreads];
  __shared__ int32_t carry;  // the tiles of the earlier passes
  int32_t* row = counts + blockIdx.x * tiles;
  if (threadIdx.x == 0) carry = 0;
  for (int64_t base = 0; base < tiles; base += kThreads) {
    const int64_t i = base + threadIdx.x;
    const int32_t n = i < tiles ? row[i] : 0;
    scan[threadIdx.x] = n;
    __syncthreads();
    for (int offset = 1; offset < kThreads; offset *= 2) {  // inclusive, Hillis-Steele
      const int32_t left = threadIdx.x >= offset ? scan[threadIdx.x - offset] : 0;
      __syncthreads();
      scan[threadIdx.x] += left;
      __syncthreads();
    }
    if (i < tiles) row[i] = carry + scan[threadIdx.x] - n;
    __syncthreads();
    if (threadIdx.x == 0) carry += scan[kThreads - 1];
    __syncthreads();
  }
  if (threadIdx.x == 0) expert_counts[blockIdx.x] = carry;
}

// A block per tile, after ExpertScanKernel: send_row (pairs) = each kept
// pair's row (its expert's first row, its tile's first row within the
// expert, then the expert's kept pairs before it in the tile), -1 for a
// dropped pair; row_out (M) = each row's pair divided by per_row (1: the
// pair, k: its token). Block 0 also writes offsets (E + 1): the experts'
// first rows, then M. Shared: the experts' first rows (E + 1 ints), then
// the tile's experts (kTile ints, -1 where dropped).
__global__ void TilePlaceKernel(const int32_t* expert, const float* weights, const uint64_t* bound,
                                int64_t pairs, int num_experts, int64_t tiles,
                                const int32_t* counts, const int32_t* expert_counts, int per_row,
                                int32_t* offsets, int32_t* send_row, int32_t* row_out) {
  TETRA_DYNAMIC_SHARED(int32_t, first);
  int32_t* tile_expert = first + num_experts + 1;
  const int64_t b = blockIdx.x, p = b * kTile + threadIdx.x;
  if (threadIdx.x == 0) {
    int32_t rows = 0;
    for (int e = 0; e < num_experts; ++e) {
      first[e] = rows;
      rows += expert_counts[e];
    }
    first[num_experts] = rows;
  }
  int32_t e = -1;
  if (p < pairs) {
    e = expert[p];  // checked by TileCountKernel
    if (!Kept(weights, bound, e, p)) e = -1;
  }
  tile_expert[threadIdx.x] = e;
  __syncthreads();
  if (b == 0) {
    for (int i = threadIdx.x; i <= num_experts; i += blockDim.x) offsets[i] = first[i];
  }
  if (p >= pairs) return;
  if (e < 0) {
    send_row[p] = -1;
    return;
  }
  int32_t before = 0;
  for (int j = 0; j < static_cast<int>(threadIdx.x); ++j) before += tile_expert[j] == e;
  const int32_t row = first[e] + counts[e * tiles + b] + before;
  send_row[p] = row;
  row_out[row] = static_cast<int32_t>(p / per_row);
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

void DispatchOrder(const Tensor& expert, const Tensor& weights, int64_t capacity,
                   const Tensor& send_row, const Tensor& send_token, const Tensor& expert_counts) {
  for (const Tensor* t : {&expert, &weights, &send_row, &send_token, &expert_counts}) {
    ExpectDevice(*t, "DispatchOrder", "an operand");
  }
  const int64_t pairs = expert.numel();
  const int num_experts = static_cast<int>(expert_counts.numel());
  if (pairs == 0) {
    ZeroBytes(expert_counts.raw(), expert_counts.nbytes());
    return;
  }
  const int k = static_cast<int>(expert.dim(1));
  const int64_t tiles = CeilDiv(pairs, kTile);
  // Scratch: bound (E) uint64, counts (E, tiles), offsets (E + 1) and, with
  // a capacity, row_pair (pairs) int32.
  const size_t ints = num_experts * tiles + num_experts + 1 + (capacity >= 0 ? pairs : 0);
  uint64_t* bound =
      static_cast<uint64_t*>(Scratch(num_experts * sizeof(uint64_t) + ints * sizeof(int32_t)));
  int32_t* counts = reinterpret_cast<int32_t*>(bound + num_experts);
  int32_t* offsets = counts + num_experts * tiles;
  int32_t* row_pair = offsets + num_experts + 1;
  const unsigned grid = static_cast<unsigned>(tiles);
  const size_t count_shared = num_experts * sizeof(int32_t);
  const size_t place_shared = (num_experts + 1 + kTile) * sizeof(int32_t);
  // The counting sort of the pairs that `kept_bound` keeps (null: all).
  const auto sort = [&](const uint64_t* kept_bound, int per_row, int32_t* row_out) {
    LaunchKernel(TileCountKernel, grid, kThreads, count_shared, CurrentStream(),
                 expert.data<int32_t>(), weights.f32(), kept_bound, pairs, num_experts, tiles,
                 counts);
    LaunchKernel(ExpertScanKernel, num_experts, kThreads, 0, CurrentStream(), counts, tiles,
                 expert_counts.data<int32_t>());
    LaunchKernel(TilePlaceKernel, grid, kThreads, place_shared, CurrentStream(),
                 expert.data<int32_t>(), weights.f32(), kept_bound, pairs, num_experts, tiles,
                 counts, expert_counts.data<int32_t>(), per_row, offsets, send_row.data<int32_t>(),
                 row_out);
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
