// Multi-head latent attention's per-head keys and values on the device
// (ops::MlaSplitKeyValue and its adjoint): one thread per output element.
#include <utility>

#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_math.cuh"

namespace tetra::cuda {
namespace {

constexpr int kThreads = 256;

// Elements (row, head, j) of key (j < nope + rope) then of value (j < vdim).
template <typename T>
__global__ void SplitKernel(const T* kv, const T* k_pe, T* key, T* value, int64_t rows,
                            int64_t heads, int64_t nope, int64_t rope, int64_t vdim) {
  const int64_t key_dim = nope + rope, kv_dim = nope + vdim;
  const int64_t keys = rows * heads * key_dim, n = keys + rows * heads * vdim;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < n;
       idx += int64_t{gridDim.x} * blockDim.x) {
    if (idx < keys) {
      const int64_t row_head = idx / key_dim, j = idx % key_dim;
      key[idx] = j < nope ? kv[row_head * kv_dim + j] : k_pe[row_head / heads * rope + j - nope];
    } else {
      const int64_t e = idx - keys, row_head = e / vdim;
      value[e] = kv[row_head * kv_dim + nope + e % vdim];
    }
  }
}

// Elements (row, head, j) of dkv, then (row, j) of dk_pe summed over heads
// in head order in fp32.
template <typename T>
__global__ void MergeKernel(const T* dkey, const T* dvalue, T* dkv, T* dk_pe, int64_t rows,
                            int64_t heads, int64_t nope, int64_t rope, int64_t vdim) {
  const int64_t key_dim = nope + rope, kv_dim = nope + vdim;
  const int64_t kvs = rows * heads * kv_dim, n = kvs + rows * rope;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < n;
       idx += int64_t{gridDim.x} * blockDim.x) {
    if (idx < kvs) {
      const int64_t row_head = idx / kv_dim, j = idx % kv_dim;
      dkv[idx] = j < nope ? dkey[row_head * key_dim + j] : dvalue[row_head * vdim + j - nope];
    } else {
      const int64_t e = idx - kvs, row = e / rope, j = e % rope;
      float sum = 0;
      for (int64_t h = 0; h < heads; ++h)
        sum += ToFloat(dkey[(row * heads + h) * key_dim + nope + j]);
      dk_pe[e] = FromFloat<T>(sum);
    }
  }
}

}  // namespace

void MlaSplitKeyValue(const Tensor& kv, const Tensor& k_pe, const Tensor& key,
                      const Tensor& value) {
  for (const auto& [t, name] :
       {std::pair{&kv, "kv"}, {&k_pe, "k_pe"}, {&key, "key"}, {&value, "value"}}) {
    ExpectDevice(*t, "MlaSplitKeyValue", name);
  }
  const int64_t rows = key.dim(0) * key.dim(1), heads = key.dim(2);
  const int64_t nope = kv.dim(-1) / heads - value.dim(3);
  const int64_t n = key.numel() + value.numel();
  if (n == 0) return;
  DispatchFloat(key.dtype(), "MlaSplitKeyValue", [&](auto tag) {
    using T = decltype(tag);
    LaunchKernel(SplitKernel<T>, GridFor(n, kThreads), kThreads, 0, CurrentStream(), kv.data<T>(),
                 k_pe.data<T>(), key.data<T>(), value.data<T>(), rows, heads, nope,
                 key.dim(3) - nope, value.dim(3));
  });
}

void MlaMergeKeyValueBackward(const Tensor& dkey, const Tensor& dvalue, const Tensor& dkv,
                              const Tensor& dk_pe) {
  for (const auto& [t, name] :
       {std::pair{&dkey, "dkey"}, {&dvalue, "dvalue"}, {&dkv, "dkv"}, {&dk_pe, "dk_pe"}}) {
    ExpectDevice(*t, "MlaMergeKeyValueBackward", name);
  }
  const int64_t rows = dkey.dim(0) * dkey.dim(1), heads = dkey.dim(2);
  const int64_t nope = dkv.dim(-1) / heads - dvalue.dim(3);
  const int64_t n = dkv.numel() + dk_pe.numel();
  if (n == 0) return;
  DispatchFloat(dkey.dtype(), "MlaMergeKeyValueBackward", [&](auto tag) {
    using T = decltype(tag);
    LaunchKernel(MergeKernel<T>, GridFor(n, kThreads), kThreads, 0, CurrentStream(), dkey.data<T>(),
                 dvalue.data<T>(), dkv.data<T>(), dk_pe.data<T>(), rows, heads, nope,
                 dkey.dim(3) - nope, dvalue.dim(3));
  });
}

}  // namespace tetra::cuda
