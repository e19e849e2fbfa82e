// libFuzzer entry point for OpenMegatronDataset: each input (both files in
// one, as tests/fuzz/megatron_dataset_target.h encodes them) gets that
// target's check (see tools/fuzz/README.md).
#include <cstddef>
#include <cstdint>
#include <string>

#include "tests/fuzz/megatron_dataset_target.h"
#include "tools/fuzz/fuzzer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = tetra::fuzz::ScratchPath("input");
  tetra::fuzz::Check(tetra::testing::MegatronDatasetProblem(tetra::fuzz::Bytes(data, size), path));
  return 0;
}
