#include "kernels/cpu/mla_key_value.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/partition.h"

namespace tetra::cpu {

void MlaSplitKeyValue(const float* kv, const float* k_pe, const MlaKeyValueDims& d, float* key,
                      float* value) {
  const int64_t kv_dim = d.nope + d.value, key_dim = d.nope + d.rope;
#pragma omp parallel for schedule(static) if (d.rows * d.heads * (key_dim + d.value) >= \
                                              kMinParallelWork)
  for (int64_t r = 0; r < d.rows; ++r) {
    for (int64_t h = 0; h < d.heads; ++h) {
      const float* in = kv + (r * d.heads + h) * kv_dim;
      float* k = key + (r * d.heads + h) * key_dim;
      std::memcpy(k, in, d.nope * sizeof(float));
      std::memcpy(k + d.nope, k_pe + r * d.rope, d.rope * sizeof(float));
      std::memcpy(value + (r * d.heads + h) * d.value, in + d.nope, d.value * sizeof(float));
    }
  }
}

void MlaMergeKeyValueBackward(const float* dkey, const float* dvalue, const MlaKeyValueDims& d,
                              float* dkv, float* dk_pe) {
  const int64_t kv_dim = d.nope + d.value, key_dim = d.nope + d.rope;
#pragma omp parallel for schedule(static) if (d.rows * d.heads * (key_dim + d.value) >= \
                                              kMinParallelWork)
  for (int64_t r = 0; r < d.rows; ++r) {
    float* pe = dk_pe + r * d.rope;
    std::fill(pe, pe + d.rope, 0.0f);
    for (int64_t h = 0; h < d.heads; ++h) {
      const float* k = dkey + (r * d.heads + h) * key_dim;
      float* out = dkv + (r * d.heads + h) * kv_dim;
      std::memcpy(out, k, d.nope * sizeof(float));
      std::memcpy(out + d.nope, dvalue + (r * d.heads + h) * d.value, d.value * sizeof(float));
      for (int64_t j = 0; j < d.rope; ++j) pe[j] += k[d.nope + j];
    }
  }
}

}  // namespace tetra::cpu
