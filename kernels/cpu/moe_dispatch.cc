#include "kernels/cpu/moe_dispatch.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/logging.h"

namespace tetra::cpu {

void DispatchOrder(const int32_t* expert, const float* weights, int64_t n, int k, int num_experts,
                   int64_t capacity, int32_t* send_row, int32_t* send_token,
                   int32_t* expert_counts) {
  const int64_t pairs = n * k;
  // The pairs of each expert, in pair order.
  std::vector<std::vector<int64_t>> by_expert(num_experts);
  for (int64_t p = 0; p < pairs; ++p) {
    TETRA_CHECK(expert[p] >= 0 && expert[p] < num_experts)
        << "expert " << expert[p] << " of pair " << p << " outside [0, " << num_experts << ")";
    by_expert[expert[p]].push_back(p);
  }
  if (capacity >= 0) {
    for (auto& list : by_expert) {
      if (static_cast<int64_t>(list.size()) <= capacity) continue;
      // Keep the highest weights (ties: the earlier pair), then restore pair order.
      std::stable_sort(list.begin(), list.end(),
                       [&](int64_t a, int64_t b) { return weights[a] > weights[b]; });
      list.resize(capacity);
      std::sort(list.begin(), list.end());
    }
  }
  std::fill(send_row, send_row + pairs, -1);
  int64_t rows = 0;
  for (int e = 0; e < num_experts; ++e) {
    expert_counts[e] = static_cast<int32_t>(by_expert[e].size());
    for (int64_t p : by_expert[e]) {
      send_row[p] = static_cast<int32_t>(rows);
      send_token[rows++] = static_cast<int32_t>(p / k);
    }
  }
}

namespace {

// index[i] as a row of src, checked.
int64_t Row(const int32_t* index, int64_t i, int64_t src_rows) {
  const int64_t row = index[i];
  TETRA_CHECK(row >= 0 && row < src_rows)
      << "row " << row << " at " << i << " outside [0, " << src_rows << ")";
  return row;
}

}  // namespace

void GatherRows(const float* src, int64_t src_rows, const int32_t* index, int64_t m, int64_t c,
                float* dst) {
  for (int64_t i = 0; i < m; ++i)
    std::memcpy(dst + i * c, src + Row(index, i, src_rows) * c, c * sizeof(float));
}

void CombineRows(const float* src, int64_t src_rows, const int32_t* index, const float* weights,
                 int64_t n, int k, int64_t c, float* dst) {
  for (int64_t t = 0; t < n; ++t) {
    float* out = dst + t * c;
    std::fill(out, out + c, 0.0f);
    for (int j = 0; j < k; ++j) {
      if (index[t * k + j] < 0) continue;
      const float* from = src + Row(index, t * k + j, src_rows) * c;
      if (weights == nullptr) {
        for (int64_t i = 0; i < c; ++i) out[i] += from[i];
      } else {
        const float w = weights[t * k + j];
        for (int64_t i = 0; i < c; ++i) out[i] += w * from[i];
      }
    }
  }
}

void CombineRowsBackward(const float* ddst, const float* src, int64_t src_rows,
                         const int32_t* index, const float* weights, int64_t n, int k, int64_t c,
                         float* dsrc, float* dweights) {
  for (int64_t t = 0; t < n; ++t) {
    const float* d = ddst + t * c;
    for (int j = 0; j < k; ++j) {
      float& dw = dweights[t * k + j];
      dw = 0;
      if (index[t * k + j] < 0) continue;  // a dropped pair adds nothing, so gets no gradient
      const int64_t row = Row(index, t * k + j, src_rows);
      const float w = weights[t * k + j];
      const float* from = src + row * c;
      float* to = dsrc + row * c;
      for (int64_t i = 0; i < c; ++i) {
        dw += d[i] * from[i];
        to[i] = w * d[i];
      }
    }
  }
}

}  // namespace tetra::cpu
