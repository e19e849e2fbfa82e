// The op table's machinery, after ggml's test-backend-ops: every op of the op
// API (kernels/ops.h) has cases in one table (tests/kernels/op_cases.h), each
// naming its op, shapes and dtype and a tolerance with its reason for every
// output. A case is code run against a Backend, which places the case's
// inputs where that backend computes and reads its outputs back, so the same
// case runs on the CPU (the reference) and on every other backend, and the
// runner compares their outputs element by element.
//
// The CPU reference computes in fp32 on inputs rounded to the case's dtype; the
// other backends (a device, or the CPU itself) compute on tensors of the
// case's dtype. So a bf16 case differs from the reference only by the
// backend's own arithmetic and output rounding.
#ifndef TETRA_TESTS_KERNELS_OP_TABLE_H_
#define TETRA_TESTS_KERNELS_OP_TABLE_H_

#include <cmath>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "tests/testing/gradient_check.h"

namespace tetra::testing {

// |got - want| <= abs + rel * |want|, elementwise, and why that much.
struct Tolerance {
  double abs = 0, rel = 0;
  const char* reason = "";
};
// Moves and integer arithmetic: bit for bit.
inline constexpr Tolerance kExact{0, 0, "moved or counted, not computed: bit for bit"};

// Host fp32 tensor of N(0, scale^2) values from (stream).
inline Tensor HostRandom(const Shape& shape, uint64_t stream, float scale = 1.0f) {
  Tensor t = Tensor::Empty(shape);
  const std::vector<float> values = RandomVector(t.numel(), stream, scale);
  std::copy(values.begin(), values.end(), t.f32());
  return t;
}

// Host int32 tensor of `values`.
inline Tensor HostInts(const std::vector<int32_t>& values, const Shape& shape) {
  Tensor t = Tensor::Empty(shape, DType::kI32);
  std::copy(values.begin(), values.end(), t.data<int32_t>());
  return t;
}

// The fp32 values a `dtype` tensor holds after rounding host (fp32) into it.
inline Tensor RoundTo(const Tensor& host, DType dtype) {
  if (dtype == DType::kF32) return host.Clone();
  Tensor narrow = Tensor::Empty(host.shape(), dtype);
  ops::Cast(host, narrow);
  Tensor back = Tensor::Empty(host.shape());
  ops::Cast(narrow, back);
  return back;
}

// t's values as a host fp32 tensor, from any device and float dtype.
inline Tensor ReadF32(const Tensor& t) {
  Tensor host = Tensor::Empty(t.shape(), t.dtype());
  host.CopyFrom(t);
  Tensor f32 = Tensor::Empty(t.shape());
  ops::Cast(host, f32);
  return f32;
}

// Where a case runs, and on what.
class Backend {
 public:
  // The CPU on fp32 tensors: what every other backend is held against.
  static Backend Reference() { return Backend(DeviceType::kCPU, true); }
  // `device` on tensors of the case's dtype (the CPU's bf16 path included).
  static Backend InCaseDtype(DeviceType device) { return Backend(device, false); }

  DeviceType device() const { return device_; }
  bool is_reference() const { return reference_; }

  // Host fp32 values rounded to `dtype`, where this backend computes: as
  // fp32 for the reference, as `dtype` otherwise.
  Tensor In(const Tensor& host, DType dtype = DType::kF32) const {
    const Tensor rounded = RoundTo(host, dtype);
    if (is_reference()) return rounded;
    Tensor narrow = Tensor::Empty(host.shape(), dtype);
    ops::Cast(rounded, narrow);
    return Moved(narrow);
  }
  // A host tensor of any dtype (ids, fp64 sums) as it is, on this backend.
  Tensor Exact(const Tensor& host) const { return is_reference() ? host.Clone() : Moved(host); }
  // Uninitialised, for outputs: fp32 for the reference, `dtype` otherwise.
  Tensor Out(const Shape& shape, DType dtype = DType::kF32) const {
    return Tensor::Empty(shape, is_reference() && IsFloat16(dtype) ? DType::kF32 : dtype, device_);
  }
  // An op's output stored in `dtype` before the next op reads it: the
  // reference rounds its fp32 values in place as a `dtype` tensor holds them.
  void Round(const Tensor& t, DType dtype) const {
    if (is_reference() && IsFloat16(dtype)) t.CopyFrom(RoundTo(t, dtype));
  }

 private:
  Backend(DeviceType device, bool reference) : device_(device), reference_(reference) {}
  static bool IsFloat16(DType dtype) { return dtype == DType::kBF16 || dtype == DType::kF16; }
  Tensor Moved(const Tensor& host) const {
    Tensor t = Tensor::Empty(host.shape(), host.dtype(), device_);
    t.CopyFrom(host);
    return t;
  }

  DeviceType device_;
  bool reference_;
};

// What one run of a case produced: named values, each with its tolerance.
struct Output {
  std::string name;
  std::vector<double> values;
  Tolerance tolerance;
};

class Outputs {
 public:
  // A tensor of any dtype and device, read back to the host.
  void Add(const std::string& name, const Tensor& t, const Tolerance& tolerance) {
    Tensor host = Tensor::Empty(t.shape(), t.dtype());
    host.CopyFrom(t);
    std::vector<double> values(host.numel());
    for (int64_t i = 0; i < host.numel(); ++i) {
      switch (host.dtype()) {
        case DType::kF32:
          values[i] = host.f32()[i];
          break;
        case DType::kBF16:
          values[i] = Bf16ToFloat(host.data<uint16_t>()[i]);
          break;
        case DType::kF16:
          values[i] = Fp16ToFloat(host.data<uint16_t>()[i]);
          break;
        case DType::kI32:
          values[i] = host.data<int32_t>()[i];
          break;
        case DType::kF64:
          values[i] = host.data<double>()[i];
          break;
      }
    }
    all_.push_back({name, std::move(values), tolerance});
  }
  void Add(const std::string& name, double value, const Tolerance& tolerance) {
    all_.push_back({name, {value}, tolerance});
  }
  const std::vector<Output>& all() const { return all_; }

 private:
  std::vector<Output> all_;
};

// One row of the table: "<op> <dtype> <shape>" and the code that runs it.
struct OpCase {
  std::string name;
  std::function<void(const Backend&, Outputs*)> run;
};

// How gtest prints a case: its name.
inline void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

inline Outputs Run(const OpCase& c, const Backend& backend) {
  Outputs outputs;
  c.run(backend, &outputs);
  return outputs;
}

// Every output of `got` within its tolerance of `want`'s (NaN never is).
inline void ExpectOutputsMatch(const Outputs& got, const Outputs& want) {
  ASSERT_EQ(got.all().size(), want.all().size());
  for (size_t o = 0; o < want.all().size(); ++o) {
    const Output &g = got.all()[o], &w = want.all()[o];
    ASSERT_EQ(g.name, w.name);
    ASSERT_EQ(g.values.size(), w.values.size()) << w.name;
    int64_t bad = 0, worst = -1;
    double worst_excess = 0;
    for (size_t i = 0; i < w.values.size(); ++i) {
      const double excess = std::fabs(g.values[i] - w.values[i]) -
                            (g.tolerance.abs + g.tolerance.rel * std::fabs(w.values[i]));
      if (!(excess <= 0)) {
        ++bad;
        if (worst < 0 || !(excess <= worst_excess))
          worst = static_cast<int64_t>(i), worst_excess = excess;
      }
    }
    EXPECT_EQ(bad, 0) << w.name << ": " << bad << " of " << w.values.size()
                      << " values outside abs " << g.tolerance.abs << " + rel " << g.tolerance.rel
                      << " (" << g.tolerance.reason << "); worst at " << worst << ": got "
                      << (worst >= 0 ? g.values[worst] : 0.0) << ", want "
                      << (worst >= 0 ? w.values[worst] : 0.0);
  }
}

}  // namespace tetra::testing

#endif  // TETRA_TESTS_KERNELS_OP_TABLE_H_
