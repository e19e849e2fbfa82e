// Grouped-query attention on the device, FlashAttention-2 style: the
// forward streams key/value tiles through shared memory with an online softmax
// in fp32 registers and saves only each query row's log-sum-exp; the backward
// recomputes the probabilities from it. Inputs fp32 or bf16, fp32 accumulate.
//
// Work split (a warp owns rows, its lanes switch between keys and dims):
//  - forward and dQ: a block takes kBlockRows query rows of one (batch, head);
//    per key tile, lane j scores key j against each of its warp's rows, then
//    each lane accumulates the dims d = lane + 32 c of the output row.
//  - dK/dV: a block takes kBlockRows keys of one (batch, kv head) and loops
//    over the query heads of its group and the query tiles that see its keys
//    (causal: those at or after them; else all); lane i scores query i, then
//    lanes accumulate dims. dK and dV of a kv head sum its query heads in
//    registers: no atomics, deterministic.
// Causal (query t sees keys 0..t, Tk = T) or not (every query sees all Tk
// keys: a block of ring attention), as kernels/cpu/attention.cc.
// Layouts: q (B, T, Hq, D); k (B, Tk, Hkv, D); v (B, Tk, Hkv, Dv); out, dout
// (B, T, Hq, Dv); lse (B, Hq, T). D and Dv are each at most kMaxDim.
#include <cmath>
#include <string>

#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"
#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/device_math.cuh"

namespace tetra::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kRowsPerWarp = 4;
constexpr int kBlockRows = kWarps * kRowsPerWarp;  // query rows (or keys) per block
constexpr int kTile = 32;                          // keys (or queries) per tile: one per lane
constexpr int kMaxDim = 128;
constexpr int kDimChunks = kMaxDim / 32;  // dims per lane

struct Dims {
  int64_t batch, seq, q_heads, kv_heads;
  int64_t keys;  // Tk, of k and v
  int64_t dim;   // D, of q and k
  int64_t vdim;  // Dv, of v, out and dout
  float scale;
  bool causal;
};

// Whether query t (< T) sees key j.
__device__ __forceinline__ bool Visible(const Dims& d, int64_t t, int64_t j) {
  return j < d.keys && (!d.causal || j <= t);
}

// The end of the keys query rows [t0, t0 + rows) see: a prefix of the keys.
__device__ __forceinline__ int64_t KeyEnd(const Dims& d, int64_t t0, int rows) {
  return d.causal ? min(t0 + rows, d.seq) : d.keys;
}

// Copies rows [t0, t0 + rows) of head h, batch b of x (B, len, H, width)
// into shared s (rows, ld) as fp32; rows past len are zero.
template <typename T>
__device__ void LoadRows(const T* x, int64_t len, int64_t heads, int64_t width, int64_t b,
                         int64_t h, int64_t t0, int rows, float* s, int ld) {
  for (int idx = threadIdx.x; idx < rows * width; idx += blockDim.x) {
    const int r = idx / width, c = idx % width;
    const int64_t t = t0 + r;
    s[r * ld + c] = t < len ? ToFloat(x[((b * len + t) * heads + h) * width + c]) : 0.0f;
  }
}

// out[i] = rows[i] . x over D for the warp's kRowsPerWarp rows (consecutive,
// `dim` apart, read by every lane alike) and this lane's own row x: each x
// element read from shared memory serves every row.
__device__ __forceinline__ void RowDots(const float* rows, const float* x, int64_t dim,
                                        float (&out)[kRowsPerWarp]) {
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) out[i] = 0.0f;
  for (int64_t c = 0; c < dim; ++c) {
    const float xc = x[c];
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) out[i] += rows[i * dim + c] * xc;
  }
}

// acc[i] += sum_j w_ij X_j over the tile's rows j of x_s (`ld` apart, `width`
// wide), lane j holding w_ij for every row i of the warp; each lane adds the
// dims lane + 32 c, and each X element read serves every row.
__device__ __forceinline__ void AccumulateTile(const float (&w)[kRowsPerWarp], const float* x_s,
                                               int ld, int64_t width, int lane,
                                               float (&acc)[kRowsPerWarp][kDimChunks]) {
  for (int j = 0; j < kTile; ++j) {
    float wj[kRowsPerWarp];
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) wj[i] = __shfl_sync(0xffffffffu, w[i], j);
#pragma unroll
    for (int c = 0; c < kDimChunks; ++c) {
      const int col = lane + 32 * c;
      if (col >= width) continue;
      const float xj = x_s[j * ld + col];
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) acc[i][c] += wj[i] * xj;
    }
  }
}

__device__ __forceinline__ void ZeroRows(float (&acc)[kRowsPerWarp][kDimChunks]) {
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
#pragma unroll
    for (int c = 0; c < kDimChunks; ++c) acc[i][c] = 0.0f;
  }
}

// Writes the warp's rows r0 + i (those below len) of head h, batch b of x
// (B, len, heads, width): acc[i], divided by divisor[i] unless it is null;
// each lane writes its dims.
template <typename T>
__device__ __forceinline__ void StoreRows(const float (&acc)[kRowsPerWarp][kDimChunks],
                                          const float* divisor, T* x, int64_t len, int64_t heads,
                                          int64_t width, int64_t b, int64_t h, int64_t r0,
                                          int lane) {
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int64_t t = r0 + i;
    if (t >= len) continue;
    T* row = x + ((b * len + t) * heads + h) * width;
#pragma unroll
    for (int c = 0; c < kDimChunks; ++c) {
      const int col = lane + 32 * c;
      if (col < width) row[col] = FromFloat<T>(divisor ? acc[i][c] / divisor[i] : acc[i][c]);
    }
  }
}

template <typename T>
__global__ void ForwardKernel(const Dims d, const T* q, const T* k, const T* v, T* out,
                              float* lse) {
  TETRA_DYNAMIC_SHARED(float, smem);
  const int ldk = d.dim + 1;              // padded: lane j reads row j, conflict-free
  float* q_s = smem;                      // (kBlockRows, D)
  float* k_s = q_s + kBlockRows * d.dim;  // (kTile, D + 1)
  float* v_s = k_s + kTile * ldk;         // (kTile, Dv)
  const int64_t b = blockIdx.z, h = blockIdx.y, t0 = int64_t{blockIdx.x} * kBlockRows;
  const int64_t hkv = h / (d.q_heads / d.kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  LoadRows(q, d.seq, d.q_heads, d.dim, b, h, t0, kBlockRows, q_s, d.dim);

  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kDimChunks];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
  }
  ZeroRows(acc);
  const int64_t key_end = KeyEnd(d, t0, kBlockRows);
  for (int64_t k0 = 0; k0 < key_end; k0 += kTile) {
    __syncthreads();  // the previous tile is consumed (and q_s is loaded)
    LoadRows(k, d.keys, d.kv_heads, d.dim, b, hkv, k0, kTile, k_s, ldk);
    LoadRows(v, d.keys, d.kv_heads, d.vdim, b, hkv, k0, kTile, v_s, d.vdim);
    __syncthreads();
    // Scores of key k0 + lane against every row of the warp.
    const int64_t key = k0 + lane;
    float score[kRowsPerWarp], p[kRowsPerWarp];
    RowDots(q_s + warp * kRowsPerWarp * d.dim, k_s + lane * ldk, d.dim, score);
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int64_t t = t0 + warp * kRowsPerWarp + i;
      p[i] = 0.0f;
      // Warp-uniform: the row takes nothing from this tile.
      if (t >= d.seq || (d.causal && k0 > t)) continue;
      const float scaled = Visible(d, t, key) ? score[i] * d.scale : -INFINITY;
      // Finite: the row sees key k0 (k0 <= t when causal, k0 < Tk always).
      const float new_m = fmaxf(m[i], WarpMax(scaled));
      p[i] = expf(scaled - new_m);
      const float correction = expf(m[i] - new_m);
      l[i] = l[i] * correction + WarpSum(p[i]);
      m[i] = new_m;
#pragma unroll
      for (int c = 0; c < kDimChunks; ++c) acc[i][c] *= correction;
    }
    AccumulateTile(p, v_s, d.vdim, d.vdim, lane, acc);  // acc[i] += sum_j p_ij V_j
  }
  const int64_t r0 = t0 + warp * kRowsPerWarp;
  StoreRows(acc, l, out, d.seq, d.q_heads, d.vdim, b, h, r0, lane);
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    if (lane == 0 && r0 + i < d.seq) lse[(b * d.q_heads + h) * d.seq + r0 + i] = m[i] + logf(l[i]);
  }
}

// The lse and delta_i = dO_i . O_i of the warp's query rows (0 past seq),
// delta also written to `delta` for the dK/dV kernel; do_s holds the
// block's dO rows.
template <typename T>
__device__ void RowStats(const Dims& d, const float* do_s, const T* out, const float* lse,
                         int64_t b, int64_t h, int64_t t0, int warp, int lane,
                         float (&row_lse)[kRowsPerWarp], float (&row_delta)[kRowsPerWarp],
                         float* delta) {
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int r = warp * kRowsPerWarp + i;
    const int64_t t = t0 + r;
    row_lse[i] = 0.0f;
    row_delta[i] = 0.0f;
    if (t >= d.seq) continue;
    const T* o = out + ((b * d.seq + t) * d.q_heads + h) * d.vdim;
    float partial = 0.0f;
#pragma unroll
    for (int c = 0; c < kDimChunks; ++c) {
      const int col = lane + 32 * c;
      if (col < d.vdim) partial += do_s[r * d.vdim + col] * ToFloat(o[col]);
    }
    row_delta[i] = WarpSum(partial);
    row_lse[i] = lse[(b * d.q_heads + h) * d.seq + t];
    if (lane == 0) delta[(b * d.q_heads + h) * d.seq + t] = row_delta[i];
  }
}

// dQ = scale * sum_j dS_ij K_j with dS = P * (dP - delta), dP = dO V^T and
// delta_i = dO_i . O_i (also written to `delta` for the dK/dV kernel).
template <typename T>
__global__ void QueryGradKernel(const Dims d, const T* dout, const T* q, const T* k, const T* v,
                                const T* out, const float* lse, float* delta, T* dq) {
  TETRA_DYNAMIC_SHARED(float, smem);
  const int ldk = d.dim + 1, ldv = d.vdim + 1;
  float* q_s = smem;                        // (kBlockRows, D)
  float* do_s = q_s + kBlockRows * d.dim;   // (kBlockRows, Dv)
  float* k_s = do_s + kBlockRows * d.vdim;  // (kTile, D + 1)
  float* v_s = k_s + kTile * ldk;           // (kTile, Dv + 1)
  const int64_t b = blockIdx.z, h = blockIdx.y, t0 = int64_t{blockIdx.x} * kBlockRows;
  const int64_t hkv = h / (d.q_heads / d.kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  LoadRows(q, d.seq, d.q_heads, d.dim, b, h, t0, kBlockRows, q_s, d.dim);
  LoadRows(dout, d.seq, d.q_heads, d.vdim, b, h, t0, kBlockRows, do_s, d.vdim);
  __syncthreads();

  float row_lse[kRowsPerWarp], row_delta[kRowsPerWarp], acc[kRowsPerWarp][kDimChunks];
  ZeroRows(acc);
  RowStats(d, do_s, out, lse, b, h, t0, warp, lane, row_lse, row_delta, delta);
  const int64_t key_end = KeyEnd(d, t0, kBlockRows);
  for (int64_t k0 = 0; k0 < key_end; k0 += kTile) {
    __syncthreads();
    LoadRows(k, d.keys, d.kv_heads, d.dim, b, hkv, k0, kTile, k_s, ldk);
    LoadRows(v, d.keys, d.kv_heads, d.vdim, b, hkv, k0, kTile, v_s, ldv);
    __syncthreads();
    // dS of key k0 + lane for every row of the warp (0 where masked).
    const int64_t key = k0 + lane;
    float score[kRowsPerWarp], dp[kRowsPerWarp], ds[kRowsPerWarp];
    RowDots(q_s + warp * kRowsPerWarp * d.dim, k_s + lane * ldk, d.dim, score);
    RowDots(do_s + warp * kRowsPerWarp * d.vdim, v_s + lane * ldv, d.vdim, dp);
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int64_t t = t0 + warp * kRowsPerWarp + i;
      ds[i] = 0.0f;
      if (t < d.seq && Visible(d, t, key)) {
        const float p = expf(score[i] * d.scale - row_lse[i]);
        ds[i] = p * (dp[i] - row_delta[i]) * d.scale;
      }
    }
    AccumulateTile(ds, k_s, ldk, d.dim, lane, acc);  // acc[i] += sum_j dS_ij K_j
  }
  StoreRows(acc, nullptr, dq, d.seq, d.q_heads, d.dim, b, h, t0 + warp * kRowsPerWarp, lane);
}

// dV_s = sum_i P_is dO_i and dK_s = scale * sum_i dS_is Q_i over the queries
// i that see key s (causal: i >= s) of every query head sharing kv head hkv.
template <typename T>
__global__ void KeyValueGradKernel(const Dims d, const T* dout, const T* q, const T* k, const T* v,
                                   const float* lse, const float* delta, T* dk, T* dv) {
  TETRA_DYNAMIC_SHARED(float, smem);
  const int ldq = d.dim + 1, ldo = d.vdim + 1;  // padded: lane i reads query row i
  float* k_s = smem;                            // (kBlockRows, D)
  float* v_s = k_s + kBlockRows * d.dim;        // (kBlockRows, Dv)
  float* q_s = v_s + kBlockRows * d.vdim;       // (kTile, D + 1)
  float* do_s = q_s + kTile * ldq;              // (kTile, Dv + 1)
  float* lse_s = do_s + kTile * ldo;            // (kTile)
  float* delta_s = lse_s + kTile;               // (kTile)
  const int64_t b = blockIdx.z, hkv = blockIdx.y, s0 = int64_t{blockIdx.x} * kBlockRows;
  const int64_t group = d.q_heads / d.kv_heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  LoadRows(k, d.keys, d.kv_heads, d.dim, b, hkv, s0, kBlockRows, k_s, d.dim);
  LoadRows(v, d.keys, d.kv_heads, d.vdim, b, hkv, s0, kBlockRows, v_s, d.vdim);

  float dk_acc[kRowsPerWarp][kDimChunks], dv_acc[kRowsPerWarp][kDimChunks];
  ZeroRows(dk_acc);
  ZeroRows(dv_acc);
  for (int64_t h = hkv * group; h < (hkv + 1) * group; ++h) {
    // Causal: queries before the tile holding query s0 see none of these keys.
    for (int64_t q0 = d.causal ? s0 / kTile * kTile : 0; q0 < d.seq; q0 += kTile) {
      __syncthreads();  // the previous tile is consumed (and k_s, v_s are loaded)
      LoadRows(q, d.seq, d.q_heads, d.dim, b, h, q0, kTile, q_s, ldq);
      LoadRows(dout, d.seq, d.q_heads, d.vdim, b, h, q0, kTile, do_s, ldo);
      if (threadIdx.x < kTile) {
        const int64_t t = q0 + threadIdx.x;
        lse_s[threadIdx.x] = t < d.seq ? lse[(b * d.q_heads + h) * d.seq + t] : 0.0f;
        delta_s[threadIdx.x] = t < d.seq ? delta[(b * d.q_heads + h) * d.seq + t] : 0.0f;
      }
      __syncthreads();
      // P and dS of query q0 + lane for every key of the warp (0 where masked).
      const int64_t t = q0 + lane;
      float score[kRowsPerWarp], dp[kRowsPerWarp], p[kRowsPerWarp], ds[kRowsPerWarp];
      RowDots(k_s + warp * kRowsPerWarp * d.dim, q_s + lane * ldq, d.dim, score);
      RowDots(v_s + warp * kRowsPerWarp * d.vdim, do_s + lane * ldo, d.vdim, dp);
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) {
        const int64_t s = s0 + warp * kRowsPerWarp + i;
        p[i] = ds[i] = 0.0f;
        if (t < d.seq && Visible(d, t, s)) {
          p[i] = expf(score[i] * d.scale - lse_s[lane]);
          ds[i] = p[i] * (dp[i] - delta_s[lane]) * d.scale;
        }
      }
      AccumulateTile(p, do_s, ldo, d.vdim, lane, dv_acc);  // dV_s += sum_j P_js dO_j
      AccumulateTile(ds, q_s, ldq, d.dim, lane, dk_acc);   // dK_s += sum_j dS_js Q_j
    }
  }
  const int64_t r0 = s0 + warp * kRowsPerWarp;
  StoreRows(dk_acc, nullptr, dk, d.keys, d.kv_heads, d.dim, b, hkv, r0, lane);
  StoreRows(dv_acc, nullptr, dv, d.keys, d.kv_heads, d.vdim, b, hkv, r0, lane);
}

// The kernels' dims of shape, whose tensors the op API has checked (and the
// engine, that the head dims are at most kMaxDim: OwnAttentionTakes).
Dims DimsOf(const AttentionShape& s, const char* op, const Tensor& q, const Tensor& k,
            const Tensor& v) {
  ExpectDevice(q, op, "q");
  ExpectDevice(k, op, "k");
  ExpectDevice(v, op, "v");
  return Dims{s.batch,    s.seq,         s.q_heads, s.kv_heads, s.keys(),
              s.head_dim, s.value_dim(), s.scale(), s.causal};
}

// Dynamic shared memory a kernel may take without raising its limit.
constexpr size_t kDefaultSharedBytes = 48 << 10;

// Launches `kernel` with `smem_bytes` of dynamic shared memory, raising the
// kernel's limit past the default 48 KiB the first time a launch needs more
// (a driver call per launch would cost every attention call on the hot path).
template <typename Kernel, typename... Args>
void Launch(Kernel kernel, dim3 grid, size_t smem_bytes, Args... args) {
  static size_t raised_to = kDefaultSharedBytes;  // one per kernel instantiation
  if (smem_bytes > raised_to) {
    TETRA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem_bytes)));
    raised_to = smem_bytes;
  }
  LaunchKernel(kernel, grid, kWarps * 32, smem_bytes, CurrentStream(), args...);
}

}  // namespace

bool OwnAttentionTakes(const AttentionShape& shape, std::string* why) {
  if (shape.head_dim <= kMaxDim && shape.value_dim() <= kMaxDim) return true;
  *why = "tetra's own kernel takes head dims up to " + std::to_string(kMaxDim) + ", not " +
         std::to_string(shape.head_dim) + "/" + std::to_string(shape.value_dim());
  return false;
}

void OwnAttention(const AttentionShape& shape, const Tensor& q, const Tensor& k, const Tensor& v,
                  const Tensor& out, const Tensor& lse) {
  const Dims d = DimsOf(shape, "Attention", q, k, v);
  ExpectDevice(out, "Attention", "out");
  ExpectDevice(lse, "Attention", "lse");
  if (d.batch * d.seq == 0) return;
  const dim3 grid(CeilDiv(d.seq, kBlockRows), d.q_heads, d.batch);
  const size_t smem = (kBlockRows * d.dim + kTile * (d.dim + 1) + kTile * d.vdim) * sizeof(float);
  DispatchFloat(q.dtype(), "Attention", [&](auto tag) {
    using T = decltype(tag);
    Launch(ForwardKernel<T>, grid, smem, d, q.data<T>(), k.data<T>(), v.data<T>(), out.data<T>(),
           lse.f32());
  });
}

void OwnAttentionBackward(const AttentionShape& shape, const Tensor& dout, const Tensor& q,
                          const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                          const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  const Dims d = DimsOf(shape, "AttentionBackward", q, k, v);
  for (const Tensor* t : {&dout, &out, &dq, &dk, &dv, &lse}) {
    ExpectDevice(*t, "AttentionBackward", "an operand");
  }
  if (d.batch * d.seq == 0) return;
  float* delta = static_cast<float*>(Scratch(d.batch * d.q_heads * d.seq * sizeof(float)));
  // Both kernels hold (kBlockRows, D) and (kBlockRows, Dv) blocks and padded
  // (kTile, D + 1) and (kTile, Dv + 1) tiles; dK/dV adds lse and delta tiles.
  const size_t q_smem =
      (kBlockRows * (d.dim + d.vdim) + kTile * (d.dim + d.vdim + 2)) * sizeof(float);
  const size_t kv_smem = q_smem + 2 * kTile * sizeof(float);
  DispatchFloat(q.dtype(), "AttentionBackward", [&](auto tag) {
    using T = decltype(tag);
    Launch(QueryGradKernel<T>, dim3(CeilDiv(d.seq, kBlockRows), d.q_heads, d.batch), q_smem, d,
           dout.data<T>(), q.data<T>(), k.data<T>(), v.data<T>(), out.data<T>(), lse.f32(), delta,
           dq.data<T>());
    Launch(KeyValueGradKernel<T>, dim3(CeilDiv(d.keys, kBlockRows), d.kv_heads, d.batch), kv_smem,
           d, dout.data<T>(), q.data<T>(), k.data<T>(), v.data<T>(), lse.f32(), delta, dk.data<T>(),
           dv.data<T>());
  });
}

}  // namespace tetra::cuda
