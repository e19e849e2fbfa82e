// The token-dispatch arithmetic of a mixture-of-experts layer: the order in
// which a micro-batch's (token, choice) pairs travel, grouped by expert, and
// the row moves around the experts (permute, combine, and their adjoints).
// Rows are C floats; pair p = t k + j is token t's j-th choice.
#ifndef TETRA_KERNELS_CPU_MOE_DISPATCH_H_
#define TETRA_KERNELS_CPU_MOE_DISPATCH_H_

#include <cstdint>

namespace tetra::cpu {

// The pairs grouped by expert, in pair order within each expert; with
// capacity >= 0 each expert keeps at most `capacity` pairs, those of highest
// weight (the earlier pair on ties). expert, weights (n, k) ->
// send_row (n, k): each pair's row in that order, -1 when dropped;
// send_token (M): the token of each row; expert_counts (num_experts): rows of
// each expert (M in all).
void DispatchOrder(const int32_t* expert, const float* weights, int64_t n, int k, int num_experts,
                   int64_t capacity, int32_t* send_row, int32_t* send_token,
                   int32_t* expert_counts);

// dst (m, c) row i = src (src_rows, c) row index[i]; an index outside
// [0, src_rows) is a bug (checked), here and below.
void GatherRows(const float* src, int64_t src_rows, const int32_t* index, int64_t m, int64_t c,
                float* dst);

// dst (n, c) row t = sum over j < k with index[t k + j] >= 0 of
// weights[t k + j] x src row index[t k + j] (weights null: the plain sum),
// summed in j order, written.
void CombineRows(const float* src, int64_t src_rows, const int32_t* index, const float* weights,
                 int64_t n, int k, int64_t c, float* dst);

// CombineRows' backward given ddst (n, c), each src row the row of one pair
// (index values other than -1 distinct, as DispatchOrder's send_row): dsrc row index[t k + j] =
// weights[t k + j] x ddst row t, and dweights[t k + j] = ddst row t . src row
// index[t k + j] (0 for a dropped pair, whose dsrc row does not exist).
void CombineRowsBackward(const float* ddst, const float* src, int64_t src_rows,
                         const int32_t* index, const float* weights, int64_t n, int k, int64_t c,
                         float* dsrc, float* dweights);

}  // namespace tetra::cpu

#endif  // TETRA_KERNELS_CPU_MOE_DISPATCH_H_
