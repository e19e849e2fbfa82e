// Multi-head latent attention's per-head keys and values (DeepSeek-V3): the
// up-projection kv_b_proj gives each token, for every head, its key dims
// without position and its value; the one rotary key k_pe of the token is
// shared by all heads. These kernels lay them out as the attention op reads
// them, and take the gradients back.
#ifndef TETRA_KERNELS_CPU_MLA_KEY_VALUE_H_
#define TETRA_KERNELS_CPU_MLA_KEY_VALUE_H_

#include <cstdint>

namespace tetra::cpu {

// Sizes: `rows` tokens, `heads` heads, `nope` key dims without position,
// `rope` rotary ones, `value` value dims.
struct MlaKeyValueDims {
  int64_t rows, heads, nope, rope, value;
};

// kv (rows, heads, nope + value) and k_pe (rows, rope) -> key (rows, heads,
// nope + rope) = [kv's first nope | k_pe] per head and value (rows, heads,
// value) = kv's last value dims.
void MlaSplitKeyValue(const float* kv, const float* k_pe, const MlaKeyValueDims& d, float* key,
                      float* value);

// The adjoint: dkv (rows, heads, nope + value) = [dkey's first nope |
// dvalue] per head, and dk_pe (rows, rope) = the sum over heads of dkey's
// last rope dims, in head order; both written.
void MlaMergeKeyValueBackward(const float* dkey, const float* dvalue, const MlaKeyValueDims& d,
                              float* dkv, float* dk_pe);

}  // namespace tetra::cpu

#endif  // TETRA_KERNELS_CPU_MLA_KEY_VALUE_H_
