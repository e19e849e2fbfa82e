#include "kernels/cpu/attention.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>

#include "core/logging.h"
#include "kernels/cpu/vec_math.h"

namespace tetra::cpu {
namespace {

// Tile products are hand-written rather than cblas_sgemm calls: they run inside
// our OpenMP loop over (batch, head, tile), where BLAS would have to be forced
// single-threaded per call, and the tiles are small enough that
// register-blocked loops keep up with it.
//
// Within a query tile the scores are held transposed, S^T (keys x queries), so
// that every per-query softmax statistic is a vector op across a key row.

constexpr int64_t kTileRows = 64;  // query rows per tile

// A Vec is one native register; a 6 x kNrVecs block of C stays in registers.
#if defined(__AVX512F__)
constexpr int kVecFloats = 16;
constexpr int kNrVecs = 4;  // 24 of the 32 zmm registers
#elif defined(__AVX__)
constexpr int kVecFloats = 8;
constexpr int kNrVecs = 2;  // 12 of the 16 ymm registers
#else
constexpr int kVecFloats = 4;
constexpr int kNrVecs = 2;  // 12 of the 16 xmm registers
#endif
constexpr int kMr = 6;  // rows of C per micro-tile

using Vec = float __attribute__((vector_size(kVecFloats * sizeof(float))));

inline Vec Load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void Store(float* p, const Vec& v) { std::memcpy(p, &v, sizeof(v)); }
// x - 0 is exactly x, even for x = -0, so this compiles to one broadcast.
inline Vec Splat(float x) { return x - Vec{}; }

// C (m x n) = or += A (m x depth) * B (depth x n). A is read element by element
// at a[r * a_row + p * a_col], so it can be a transposed view; rows of B and C
// are contiguous with strides ldb and ldc.
struct Gemm {
  int64_t m, n, depth;
  const float* a;
  int64_t a_row, a_col;
  const float* b;
  int64_t ldb;
  float* c;
  int64_t ldc;
  bool accumulate;
};

// One kRows x (kVecs * kVecFloats) block of C at (row0, col0), held in
// registers across the whole depth.
template <int kRows, int kVecs>
void MicroTile(const Gemm& g, int64_t row0, int64_t col0) {
  const float* a = g.a + row0 * g.a_row;
  const float* b = g.b + col0;
  Vec acc[kRows][kVecs];
  for (int r = 0; r < kRows; ++r) {
    for (int v = 0; v < kVecs; ++v) acc[r][v] = Splat(0.0f);
  }
  for (int64_t p = 0; p < g.depth; ++p) {
    Vec bv[kVecs];
    for (int v = 0; v < kVecs; ++v) bv[v] = Load(b + p * g.ldb + v * kVecFloats);
    for (int r = 0; r < kRows; ++r) {
      const Vec av = Splat(a[r * g.a_row + p * g.a_col]);
      for (int v = 0; v < kVecs; ++v) acc[r][v] += av * bv[v];
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int v = 0; v < kVecs; ++v) {
      float* dst = g.c + (row0 + r) * g.ldc + col0 + v * kVecFloats;
      Store(dst, g.accumulate ? acc[r][v] + Load(dst) : acc[r][v]);
    }
  }
}

using MicroTileFn = void (*)(const Gemm&, int64_t, int64_t);

template <size_t... I>
constexpr std::array<MicroTileFn, sizeof...(I)> MakeMicroTiles(std::index_sequence<I...>) {
  return {&MicroTile<I / kNrVecs + 1, I % kNrVecs + 1>...};
}
// kMicroTiles[(rows - 1) * kNrVecs + vecs - 1] handles a rows x vecs block.
constexpr auto kMicroTiles = MakeMicroTiles(std::make_index_sequence<kMr * kNrVecs>());

void RunGemm(const Gemm& g) {
  const int64_t vector_cols = g.n / kVecFloats * kVecFloats;
  for (int64_t col = 0; col < vector_cols; col += kNrVecs * kVecFloats) {
    const int64_t vecs = std::min<int64_t>(kNrVecs, (vector_cols - col) / kVecFloats);
    for (int64_t row = 0; row < g.m; row += kMr) {
      const int64_t rows = std::min<int64_t>(kMr, g.m - row);
      kMicroTiles[(rows - 1) * kNrVecs + vecs - 1](g, row, col);
    }
  }
  // Columns past the last whole vector (a head dim or a last query tile that
  // is not a multiple of the vector width).
  for (int64_t r = 0; r < g.m; ++r) {
    for (int64_t col = vector_cols; col < g.n; ++col) {
      float sum = 0;
      for (int64_t p = 0; p < g.depth; ++p) {
        sum += g.a[r * g.a_row + p * g.a_col] * g.b[p * g.ldb + col];
      }
      float& dst = g.c[r * g.ldc + col];
      dst = g.accumulate ? dst + sum : sum;
    }
  }
}

// Addressing of the (B, T, Hq, D) q, (B, Tk, Hkv, D) k, (B, Tk, Hkv, Dv) v,
// (B, T, Hq, Dv) out and the (B, Hq, T) lse; gradients share their tensor's
// layout.
struct Layout {
  explicit Layout(const AttentionShape& s)
      : shape(s),
        keys(s.keys()),
        dim(s.head_dim),
        value_dim(s.value_dim()),
        q_row(s.q_heads * dim),
        k_row(s.kv_heads * dim),
        v_row(s.kv_heads * value_dim),
        out_row(s.q_heads * value_dim),
        group(s.q_heads / s.kv_heads),
        tiles((s.seq + kTileRows - 1) / kTileRows),
        scale(s.scale()) {}
  int64_t QOffset(int64_t b, int64_t t, int64_t h) const { return QRow(b, t) * q_row + h * dim; }
  int64_t KOffset(int64_t b, int64_t j, int64_t g) const { return KRow(b, j) * k_row + g * dim; }
  int64_t VOffset(int64_t b, int64_t j, int64_t g) const {
    return KRow(b, j) * v_row + g * value_dim;
  }
  int64_t OutOffset(int64_t b, int64_t t, int64_t h) const {
    return QRow(b, t) * out_row + h * value_dim;
  }
  int64_t LseOffset(int64_t b, int64_t h, int64_t t) const {
    return (b * shape.q_heads + h) * shape.seq + t;
  }
  int64_t QRow(int64_t b, int64_t t) const { return b * shape.seq + t; }  // query t's row
  int64_t KRow(int64_t b, int64_t j) const { return b * keys + j; }       // key j's row
  // Keys that query tile [t0, t0 + rows) sees: a prefix of the key sequence.
  int64_t TileKeys(int64_t t0, int64_t rows) const { return shape.causal ? t0 + rows : keys; }
  const AttentionShape shape;
  const int64_t keys;       // Tk
  const int64_t dim;        // D
  const int64_t value_dim;  // Dv
  // Strides between time steps.
  const int64_t q_row;    // q, dq
  const int64_t k_row;    // k, dk
  const int64_t v_row;    // v, dv
  const int64_t out_row;  // out, dout
  const int64_t group;    // query heads per kv head
  const int64_t tiles;    // query tiles per sequence
  const float scale;      // AttentionShape::scale()
};

// One thread's scratch, (2 Tk + D + Dv + 2) * kTileRows floats, left
// uninitialised: every step writes its part before reading it.
struct TileScratch {
  explicit TileScratch(const Layout& l)
      : buffer(std::make_unique_for_overwrite<float[]>((2 * l.keys + l.dim + l.value_dim + 2) *
                                                       kTileRows)),
        scores(buffer.get()),
        grad_scores(scores + l.keys * kTileRows),
        q_t(grad_scores + l.keys * kTileRows),
        dout_t(q_t + l.dim * kTileRows),
        row_stat(dout_t + l.value_dim * kTileRows),
        row_sum(row_stat + kTileRows) {}
  std::unique_ptr<float[]> buffer;
  float* scores;       // S^T then P^T: (keys, kTileRows)
  float* grad_scores;  // dP^T then dS^T: (keys, kTileRows)
  float* q_t;          // (D, kTileRows)
  float* dout_t;       // (Dv, kTileRows)
  float* row_stat;     // per query: scaled max (forward) or lse (backward)
  float* row_sum;      // per query: softmax denominator or rowsum(dout * out)
};

// dst (D, kTileRows) = the `rows` rows of src (stride `row`) transposed.
void PackTransposed(const float* src, int64_t row, int64_t rows, int64_t d, float* dst) {
  for (int64_t c = 0; c < d; ++c) {
    for (int64_t i = 0; i < rows; ++i) dst[c * kTileRows + i] = src[i * row + c];
  }
}

// sum(a[i] * b[i]) over n elements, in kVecFloats partial sums.
float Dot(const float* a, const float* b, int64_t n) {
  Vec partial = Splat(0.0f);
  int64_t i = 0;
  for (; i + kVecFloats <= n; i += kVecFloats) partial += Load(a + i) * Load(b + i);
  float sum = 0;
  for (int lane = 0; lane < kVecFloats; ++lane) sum += partial[lane];
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// Scores of query tile [t0, t0 + rows) against its keys [0, l.TileKeys(t0,
// rows)), as S^T (keys, kTileRows) in `scores`: raw q.k, with the causal
// mask as -inf when the attention is causal.
void TileScores(const Layout& l, const float* q_t, const float* k_head, int64_t t0, int64_t rows,
                float* scores) {
  const int64_t keys = l.TileKeys(t0, rows);
  RunGemm({.m = keys,
           .n = rows,
           .depth = l.dim,
           .a = k_head,
           .a_row = l.k_row,
           .a_col = 1,
           .b = q_t,
           .ldb = kTileRows,
           .c = scores,
           .ldc = kTileRows,
           .accumulate = false});
  if (!l.shape.causal) return;
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  for (int64_t j = t0 + 1; j < keys; ++j) {
    std::fill(scores + j * kTileRows, scores + j * kTileRows + (j - t0), kMasked);
  }
}

void ForwardTile(const Layout& l, const float* q, const float* k, const float* v, float* out,
                 float* lse, int64_t b, int64_t h, int64_t tile, TileScratch& scratch) {
  const AttentionShape& s = l.shape;
  const int64_t t0 = tile * kTileRows;
  const int64_t rows = std::min(kTileRows, s.seq - t0);
  const int64_t keys = l.TileKeys(t0, rows);
  const int64_t g = h / l.group;
  float* scores = scratch.scores;
  float* max_scaled = scratch.row_stat;
  float* denom = scratch.row_sum;

  PackTransposed(q + l.QOffset(b, t0, h), l.q_row, rows, l.dim, scratch.q_t);
  TileScores(l, scratch.q_t, k + l.KOffset(b, 0, g), t0, rows, scores);

  std::fill(max_scaled, max_scaled + rows, -std::numeric_limits<float>::infinity());
  for (int64_t j = 0; j < keys; ++j) {
    const float* row = scores + j * kTileRows;
    for (int64_t i = 0; i < rows; ++i) max_scaled[i] = std::max(max_scaled[i], row[i]);
  }
  // Every query sees key 0 (causal or not), so each max is finite.
  for (int64_t i = 0; i < rows; ++i) max_scaled[i] *= l.scale;
  std::fill(denom, denom + rows, 0.0f);
  for (int64_t j = 0; j < keys; ++j) {
    float* row = scores + j * kTileRows;
    for (int64_t i = 0; i < rows; ++i) {
      row[i] = VecExp(l.scale * row[i] - max_scaled[i]);
      denom[i] += row[i];
    }
  }
  for (int64_t i = 0; i < rows; ++i) {
    lse[l.LseOffset(b, h, t0 + i)] = max_scaled[i] + std::log(denom[i]);
  }

  // out rows = (P V) / denominator.
  float* out_tile = out + l.OutOffset(b, t0, h);
  RunGemm({.m = rows,
           .n = l.value_dim,
           .depth = keys,
           .a = scores,
           .a_row = 1,
           .a_col = kTileRows,
           .b = v + l.VOffset(b, 0, g),
           .ldb = l.v_row,
           .c = out_tile,
           .ldc = l.out_row,
           .accumulate = false});
  for (int64_t i = 0; i < rows; ++i) {
    const float inv = 1.0f / denom[i];
    float* row = out_tile + i * l.out_row;
    for (int64_t c = 0; c < l.value_dim; ++c) row[c] *= inv;
  }
}

// dS^T = P^T * (dP^T - rowsum(dout * out)) * scale, with dP^T = v[keys] dout_tile^T:
// the scores' gradients of a tile, (keys, rows) with row stride kTileRows.
void ScoreGradients(const Layout& l, const float* probs, const float* v_head, const float* dout_t,
                    const float* dout_dot_out, int64_t keys, int64_t rows, float* grad_scores) {
  RunGemm({.m = keys,
           .n = rows,
           .depth = l.value_dim,
           .a = v_head,
           .a_row = l.v_row,
           .a_col = 1,
           .b = dout_t,
           .ldb = kTileRows,
           .c = grad_scores,
           .ldc = kTileRows,
           .accumulate = false});
  for (int64_t j = 0; j < keys; ++j) {
    const float* p_row = probs + j * kTileRows;
    float* row = grad_scores + j * kTileRows;
    for (int64_t i = 0; i < rows; ++i) row[i] = p_row[i] * (row[i] - dout_dot_out[i]) * l.scale;
  }
}

// dq_tile = dS k[keys]; dk[keys] += dS^T q_tile (= with `first`).
void QueryKeyGradients(const Layout& l, const float* grad_scores, const float* k_head,
                       const float* q_tile, int64_t keys, int64_t rows, bool first, float* dq_tile,
                       float* dk_head) {
  RunGemm({.m = rows,
           .n = l.dim,
           .depth = keys,
           .a = grad_scores,
           .a_row = 1,
           .a_col = kTileRows,
           .b = k_head,
           .ldb = l.k_row,
           .c = dq_tile,
           .ldc = l.q_row,
           .accumulate = false});
  RunGemm({.m = keys,
           .n = l.dim,
           .depth = rows,
           .a = grad_scores,
           .a_row = kTileRows,
           .a_col = 1,
           .b = q_tile,
           .ldb = l.q_row,
           .c = dk_head,
           .ldc = l.k_row,
           .accumulate = !first});
}

// Writes the rows of dq of query tile `tile` of head h and adds the tile's
// share to dk and dv of its kv head; with `first` it overwrites dk and dv
// instead, which covers them all only for a tile that sees every key (the
// last one; without the causal mask, any).
void BackwardTile(const Layout& l, const float* dout, const float* q, const float* k,
                  const float* v, const float* out, const float* lse, float* dq, float* dk,
                  float* dv, int64_t b, int64_t h, int64_t tile, bool first, TileScratch& scratch) {
  const AttentionShape& s = l.shape;
  const int64_t t0 = tile * kTileRows;
  const int64_t rows = std::min(kTileRows, s.seq - t0);
  const int64_t keys = l.TileKeys(t0, rows);
  const int64_t g = h / l.group;
  float* probs = scratch.scores;
  float* row_lse = scratch.row_stat;
  float* dout_dot_out = scratch.row_sum;
  const float* q_tile = q + l.QOffset(b, t0, h);
  const float* dout_tile = dout + l.OutOffset(b, t0, h);
  const float* out_tile = out + l.OutOffset(b, t0, h);
  const float* k_head = k + l.KOffset(b, 0, g);

  PackTransposed(q_tile, l.q_row, rows, l.dim, scratch.q_t);
  PackTransposed(dout_tile, l.out_row, rows, l.value_dim, scratch.dout_t);
  for (int64_t i = 0; i < rows; ++i) {
    row_lse[i] = lse[l.LseOffset(b, h, t0 + i)];
    dout_dot_out[i] = Dot(dout_tile + i * l.out_row, out_tile + i * l.out_row, l.value_dim);
  }

  // P^T = exp(scale * S^T - lse), recomputed.
  TileScores(l, scratch.q_t, k_head, t0, rows, probs);
  for (int64_t j = 0; j < keys; ++j) {
    float* row = probs + j * kTileRows;
    for (int64_t i = 0; i < rows; ++i) row[i] = VecExp(l.scale * row[i] - row_lse[i]);
  }
  // dv[keys] += P^T dout_tile.
  RunGemm({.m = keys,
           .n = l.value_dim,
           .depth = rows,
           .a = probs,
           .a_row = kTileRows,
           .a_col = 1,
           .b = dout_tile,
           .ldb = l.out_row,
           .c = dv + l.VOffset(b, 0, g),
           .ldc = l.v_row,
           .accumulate = !first});
  ScoreGradients(l, probs, v + l.VOffset(b, 0, g), scratch.dout_t, dout_dot_out, keys, rows,
                 scratch.grad_scores);
  QueryKeyGradients(l, scratch.grad_scores, k_head, q_tile, keys, rows, first,
                    dq + l.QOffset(b, t0, h), dk + l.KOffset(b, 0, g));
}

void CheckShape(const AttentionShape& s) {
  TETRA_CHECK(s.batch > 0 && s.seq > 0 && s.keys() > 0 && s.q_heads > 0 && s.kv_heads > 0 &&
              s.head_dim > 0 && s.value_dim() > 0)
      << "attention shape (B " << s.batch << ", T " << s.seq << ", Tk " << s.keys() << ", Hq "
      << s.q_heads << ", Hkv " << s.kv_heads << ", D " << s.head_dim << ", Dv " << s.value_dim()
      << ") has a non-positive dim";
  TETRA_CHECK(s.q_heads % s.kv_heads == 0)
      << "q_heads " << s.q_heads << " is not a multiple of kv_heads " << s.kv_heads;
  TETRA_CHECK(!s.causal || s.keys() == s.seq)
      << "causal attention of " << s.seq << " queries over " << s.keys()
      << " keys: the causal mask needs as many keys as queries (kv_seq 0 or " << s.seq << ")";
}

}  // namespace

void AttentionForward(const AttentionShape& s, const float* q, const float* k, const float* v,
                      float* out, float* lse) {
  CheckShape(s);
  const Layout l(s);
  const int64_t heads = s.batch * s.q_heads;
  const int64_t tasks = heads * l.tiles;
#pragma omp parallel
  {
    TileScratch scratch(l);
    // Causal tiles differ in cost: hand out the longest (last) tiles first.
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t tile = l.tiles - 1 - task / heads;
      const int64_t bh = task % heads;
      ForwardTile(l, q, k, v, out, lse, bh / s.q_heads, bh % s.q_heads, tile, scratch);
    }
  }
}

void AttentionBackward(const AttentionShape& s, const float* dout, const float* q, const float* k,
                       const float* v, const float* out, const float* lse, float* dq, float* dk,
                       float* dv) {
  CheckShape(s);
  const Layout l(s);
  const int64_t kv_tasks = s.batch * s.kv_heads;
#pragma omp parallel
  {
    TileScratch scratch(l);
    // One task owns dk and dv of one (batch, kv head) and sums its query
    // heads and tiles serially, so the result does not depend on threads.
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < kv_tasks; ++task) {
      const int64_t b = task / s.kv_heads;
      const int64_t g = task % s.kv_heads;
      const int64_t first_head = g * l.group;
      for (int64_t h = first_head; h < first_head + l.group; ++h) {
        for (int64_t tile = l.tiles - 1; tile >= 0; --tile) {
          const bool first = h == first_head && tile == l.tiles - 1;
          BackwardTile(l, dout, q, k, v, out, lse, dq, dk, dv, b, h, tile, first, scratch);
        }
      }
    }
  }
}

void AttentionMerge(int64_t batch, int64_t seq, int64_t heads, int64_t value_dim,
                    const float* part_out, const float* part_lse, float* out, float* lse) {
  constexpr float kNoKeys = -std::numeric_limits<float>::infinity();
  const int64_t rows = batch * seq * heads;  // (b, t, h), out's row order
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t h = r % heads, t = r / heads % seq, b = r / heads / seq;
    float& row_lse = lse[(b * heads + h) * seq + t];
    const float a = row_lse, p = part_lse[(b * heads + h) * seq + t];
    const float m = std::max(a, p);
    if (m == kNoKeys) continue;  // neither side has keys
    // log(e^a + e^p) = m + log1p(e^-|a - p|): no overflow, exact where one
    // side dominates.
    const float merged = m + std::log1p(std::exp(std::min(a, p) - m));
    const float wa = std::exp(a - merged), wp = std::exp(p - merged);
    float* o = out + r * value_dim;
    const float* po = part_out + r * value_dim;
    for (int64_t c = 0; c < value_dim; ++c) {
      // A side without keys (weight 0 from lse -inf) adds nothing, even
      // where its out holds no number.
      o[c] = (a == kNoKeys ? 0.0f : wa * o[c]) + (p == kNoKeys ? 0.0f : wp * po[c]);
    }
    row_lse = merged;
  }
}

}  // namespace tetra::cpu
