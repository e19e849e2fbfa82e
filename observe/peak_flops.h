// Dense peak throughput of the GPUs we train on, for MFU: the vendor's
// dense (no sparsity) tensor-core bf16 figure, and plain fp32 (no TF32, as
// the fp32 path runs), looked up by the CUDA device name.
#ifndef TETRA_OBSERVE_PEAK_FLOPS_H_
#define TETRA_OBSERVE_PEAK_FLOPS_H_

#include <string>

namespace tetra {

struct PeakTflops {
  double bf16 = 0;  // 0: unknown device
  double fp32 = 0;
};

// By cudaDeviceProp::name, e.g. "NVIDIA H200", "NVIDIA A100-SXM4-80GB",
// "NVIDIA H100 PCIe"; zeros for a device not in the table.
PeakTflops DevicePeakTflops(const std::string& device_name);

}  // namespace tetra

#endif  // TETRA_OBSERVE_PEAK_FLOPS_H_
