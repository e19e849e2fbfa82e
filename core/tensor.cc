#include "core/tensor.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#if TETRA_HAVE_CUDA
#include "core/cuda/device_memory.h"
#endif

namespace tetra {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kBF16:
    case DType::kF16:
      return 2;
    case DType::kF64:
      return 8;
  }
  return 0;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kBF16:
      return "BF16";
    case DType::kF16:
      return "F16";
    case DType::kI32:
      return "I32";
    case DType::kF64:
      return "F64";
  }
  return "?";
}

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    TETRA_CHECK(!__builtin_mul_overflow(n, d, &n))
        << "shape " << ShapeString(shape) << " has more elements than int64 holds";
  }
  return n;
}

std::optional<int64_t> CheckedNumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return std::nullopt;
  }
  return n;
}

std::string ShapeString(const Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

namespace {

bool OnDevice(DeviceType device) {
#if !TETRA_HAVE_CUDA
  TETRA_CHECK(device == DeviceType::kCPU) << "device tensor in a build without CUDA";
#endif
  return device == DeviceType::kCUDA;
}

// memcpy for host-to-host; the CUDA runtime for any copy touching the device.
void CopyBytes(void* dst, DeviceType dst_device, const void* src, DeviceType src_device,
               size_t bytes) {
  if (OnDevice(dst_device) || OnDevice(src_device)) {
#if TETRA_HAVE_CUDA
    // A copy between device buffers stays ordered on the stream; one that
    // touches host memory completes before returning.
    cuda::CopyBytes(dst, src, bytes, /*wait=*/!(OnDevice(dst_device) && OnDevice(src_device)));
#endif
  } else {
    std::memcpy(dst, src, bytes);
  }
}

}  // namespace

Tensor Tensor::Empty(const Shape& shape, DType dtype, DeviceType device) {
  Tensor t;
  t.shape_ = shape;
  t.numel_ = NumElements(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  if (OnDevice(device)) {
#if TETRA_HAVE_CUDA
    t.storage_ = cuda::AllocateDeviceStorage(t.nbytes());
#endif
    return t;
  }
  // 64-byte alignment for AVX-512 loads; at least one line so data() is valid.
  size_t bytes = (t.nbytes() + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes == 0 ? 64 : bytes);
  TETRA_CHECK(p != nullptr) << "out of host memory allocating " << bytes << " bytes";
  t.storage_ = std::shared_ptr<void>(p, std::free);
  return t;
}

Tensor Tensor::PinnedHost(const Shape& shape, DType dtype) {
#if TETRA_HAVE_CUDA
  // Page-locking costs more than it saves below about a megabyte (counts, scalars).
  constexpr size_t kMinPinnedBytes = size_t{1} << 20;
  Tensor t = Unallocated(shape, dtype);
  if (t.nbytes() >= kMinPinnedBytes) t.storage_ = cuda::AllocatePinnedStorage(t.nbytes());
  if (t.storage_ != nullptr) return t;
#endif
  return Empty(shape, dtype);
}

Tensor Tensor::Unallocated(const Shape& shape, DType dtype) {
  Tensor t;
  t.shape_ = shape;
  t.numel_ = NumElements(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::View(void* data, const Shape& shape, DType dtype, DeviceType device) {
  Tensor t = Unallocated(shape, dtype);
  TETRA_CHECK(data != nullptr || t.numel_ == 0)
      << "view of " << t.numel_ << " " << DTypeName(dtype) << " elements at a null pointer";
  t.device_ = device;
  t.storage_ = std::shared_ptr<void>(data, [](void*) {});  // the caller owns the memory
  return t;
}

Tensor Tensor::Zeros(const Shape& shape, DType dtype, DeviceType device) {
  Tensor t = Empty(shape, dtype, device);
  t.SetZero();
  return t;
}

Tensor Tensor::Reshape(const Shape& shape) const {
  TETRA_CHECK(NumElements(shape) == numel_)
      << "reshape " << ShapeString(shape_) << " -> " << ShapeString(shape);
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::Slice(int64_t begin, int64_t end) const {
  TETRA_CHECK(rank() >= 1 && 0 <= begin && begin <= end && end <= shape_[0])
      << "slice [" << begin << ", " << end << ") of " << ShapeString(shape_);
  Tensor t = *this;
  int64_t row = shape_[0] == 0 ? 0 : numel_ / shape_[0];
  t.offset_bytes_ += begin * row * DTypeSize(dtype_);
  t.shape_[0] = end - begin;
  t.numel_ = (end - begin) * row;
  return t;
}

Tensor Tensor::Clone() const {
  Tensor t = Empty(shape_, dtype_, device_);
  CopyBytes(t.raw(), device_, raw(), device_, nbytes());
  return t;
}

void Tensor::Fill(float value) const {
  if (OnDevice(device_)) {  // fill a host copy: Fill initialises, it is not a step op
    Tensor host = Empty(shape_, dtype_);
    host.Fill(value);
    CopyFrom(host);
    return;
  }
  float* p = f32();
  for (int64_t i = 0; i < numel_; ++i) p[i] = value;
}

void Tensor::CopyFrom(const Tensor& other) const {
  TETRA_CHECK(other.dtype_ == dtype_ && other.numel_ == numel_)
      << "copy " << DTypeName(other.dtype_) << ShapeString(other.shape_) << " into "
      << DTypeName(dtype_) << ShapeString(shape_);
  CopyBytes(raw(), device_, other.raw(), other.device_, nbytes());
}

void Tensor::SetZero() const {
  if (OnDevice(device_)) {
#if TETRA_HAVE_CUDA
    cuda::ZeroBytes(raw(), nbytes());
#endif
  } else {
    std::memset(raw(), 0, nbytes());
  }
}

namespace {
thread_local Placement g_placement;
}  // namespace

const Placement& CurrentPlacement() { return g_placement; }

ScopedPlacement::ScopedPlacement(const Placement& placement) : previous_(g_placement) {
  g_placement = placement;
}

ScopedPlacement::~ScopedPlacement() { g_placement = previous_; }

int64_t SynchronizingDeviceAllocations() {
#if TETRA_HAVE_CUDA
  return cuda::SynchronizingAllocations();
#else
  return 0;
#endif
}

Tensor OnHost(const Tensor& t) {
  if (t.device() == DeviceType::kCPU) return t;
  Tensor host = Tensor::PinnedHost(t.shape(), t.dtype());
  host.CopyFrom(t);
  return host;
}

void EnsureShape(Tensor* t, const Shape& shape) {
  EnsureShape(t, shape, g_placement.compute, g_placement.device);
}

void EnsureShape(Tensor* t, const Shape& shape, DType dtype) {
  EnsureShape(t, shape, dtype, g_placement.device);
}

void EnsureShape(Tensor* t, const Shape& shape, DType dtype, DeviceType device) {
  if (!t->defined() || t->shape() != shape || t->dtype() != dtype || t->device() != device) {
    *t = Tensor::Empty(shape, dtype, device);
  }
}

float Bf16ToFloat(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t FloatToBf16(float value) {
  uint32_t u;
  std::memcpy(&u, &value, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float Fp16ToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      u = sign | ((127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace tetra
