#include "observe/peak_flops.h"

namespace tetra {

PeakTflops DevicePeakTflops(const std::string& name) {
  // First match wins: the PCIe and NVL boards before the SXM default of
  // their family. Figures from NVIDIA's data sheets (dense, boost clock).
  struct Entry {
    const char* substring;
    PeakTflops peak;
  };
  static constexpr Entry kTable[] = {
      {"H100 PCIe", {756, 51}}, {"H100 NVL", {835, 60}}, {"H100", {989, 67}},
      {"H800 PCIe", {756, 51}}, {"H800", {989, 67}},     {"H200 NVL", {835, 60}},
      {"H200", {989, 67}},      {"A100", {312, 19.5}},   {"A800", {312, 19.5}},
  };
  for (const Entry& e : kTable) {
    if (name.find(e.substring) != std::string::npos) return e.peak;
  }
  return {};
}

}  // namespace tetra
