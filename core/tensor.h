// Tensor: a shaped, typed view of a shared buffer on one device. Copies of a
// Tensor share storage (like a shared_ptr); Reshape and Slice make views of the
// same storage; Clone makes a deep copy; View wraps memory the caller owns
// (a host scalar or std::vector handed to a Communicator). Row-major, contiguous.
#ifndef TETRA_CORE_TENSOR_H_
#define TETRA_CORE_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/logging.h"

namespace tetra {

enum class DType { kF32, kBF16, kF16, kI32, kF64 };
enum class DeviceType { kCPU, kCUDA };

size_t DTypeSize(DType dtype);
const char* DTypeName(DType dtype);

using Shape = std::vector<int64_t>;
// The product of the dims; overflowing int64 is a bug here (checked): shapes
// read from files go through CheckedNumElements first.
int64_t NumElements(const Shape& shape);
// nullopt when a dim is negative or the product overflows int64.
std::optional<int64_t> CheckedNumElements(const Shape& shape);
std::string ShapeString(const Shape& shape);  // "[2, 3]"

class Tensor {
 public:
  Tensor() = default;
  // Uninitialised contents. kCUDA memory comes from the device's
  // stream-ordered pool (core/cuda/device_memory.h); builds without CUDA
  // reject kCUDA (checked).
  static Tensor Empty(const Shape& shape, DType dtype = DType::kF32,
                      DeviceType device = DeviceType::kCPU);
  static Tensor Zeros(const Shape& shape, DType dtype = DType::kF32,
                      DeviceType device = DeviceType::kCPU);
  // Uninitialised host memory for copies to and from the GPU: page-locked
  // (cudaMallocHost, so copies run at full speed) from a megabyte up where
  // this build has CUDA and a device is present, ordinary host memory
  // otherwise (below that, page-locking costs more than it saves).
  static Tensor PinnedHost(const Shape& shape, DType dtype = DType::kF32);
  // A shape and dtype without storage (defined() is false): the parameters
  // of a model that is described but not built (ParameterStore's kShapesOnly).
  static Tensor Unallocated(const Shape& shape, DType dtype = DType::kF32);
  // A non-owning view of `data`, which the caller owns and must keep alive
  // (and in place) for as long as any copy of the view, or any operation
  // started on it, lives: `Tensor::View(counts.data(), {n}, DType::kI32)`.
  // `data` may be null only when the shape has no elements.
  static Tensor View(void* data, const Shape& shape, DType dtype,
                     DeviceType device = DeviceType::kCPU);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[i < 0 ? i + shape_.size() : i]; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return numel_ * DTypeSize(dtype_); }
  DType dtype() const { return dtype_; }
  DeviceType device() const { return device_; }

  void* raw() const { return static_cast<char*>(storage_.get()) + offset_bytes_; }
  template <typename T>
  T* data() const {
    return static_cast<T*>(raw());
  }
  // fp32 access, checked.
  float* f32() const {
    TETRA_CHECK(dtype_ == DType::kF32) << "tensor is " << DTypeName(dtype_);
    return data<float>();
  }

  // Same storage, new shape with the same element count.
  Tensor Reshape(const Shape& shape) const;
  // Rows [begin, end) of dim 0, sharing storage.
  Tensor Slice(int64_t begin, int64_t end) const;
  Tensor Clone() const;
  void Fill(float value) const;  // fp32 only; on the device through a host copy
  void SetZero() const;          // every byte, on either device
  // Same dtype and element count; any pair of devices (host<->device copies
  // return once done).
  void CopyFrom(const Tensor& other) const;

 private:
  std::shared_ptr<void> storage_;
  size_t offset_bytes_ = 0;
  Shape shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::kF32;
  DeviceType device_ = DeviceType::kCPU;
};

// Where layers put their buffers: a model on the GPU computes there, in fp32
// or bf16 (mixed precision). Each thread has one placement, host fp32 unless
// a ScopedPlacement (the trainer, for a GPU run) says otherwise, so a layer
// is written once and runs on either device.
struct Placement {
  DeviceType device = DeviceType::kCPU;
  DType compute = DType::kF32;  // activations and the weights' compute copy
};
const Placement& CurrentPlacement();
class ScopedPlacement {
 public:
  explicit ScopedPlacement(const Placement& placement);
  ~ScopedPlacement();
  ScopedPlacement(const ScopedPlacement&) = delete;
  ScopedPlacement& operator=(const ScopedPlacement&) = delete;

 private:
  Placement previous_;
};

// `t`'s values on the host: `t` itself there, else a copy (Tensor::PinnedHost)
// made after the work queued on the current stream. How device state reaches
// checkpoints, exports and host counts.
Tensor OnHost(const Tensor& t);

// Reuses *t when it already has `shape`, `dtype` and `device`, else
// allocates: layers keep their activation buffers across micro-batches.
// Without a dtype: the placement's compute dtype (activations); give kF32
// for statistics and gradients that stay fp32. Without a device: the
// placement's.
void EnsureShape(Tensor* t, const Shape& shape);
void EnsureShape(Tensor* t, const Shape& shape, DType dtype);
void EnsureShape(Tensor* t, const Shape& shape, DType dtype, DeviceType device);

// Device-memory calls that waited for the device (cudaMalloc, cudaFree) so
// far: 0 where the device has a stream-ordered pool, and in builds without
// CUDA. A training step should make none.
int64_t SynchronizingDeviceAllocations();

// bf16/fp16 <-> fp32 conversions (round to nearest even for bf16).
float Bf16ToFloat(uint16_t bits);
uint16_t FloatToBf16(float value);
float Fp16ToFloat(uint16_t bits);

}  // namespace tetra

#endif  // TETRA_CORE_TENSOR_H_
