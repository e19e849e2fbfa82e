// libFuzzer entry point for SafetensorsFile::Open: each input gets the check of
// tests/fuzz/safetensors_target.h (see tools/fuzz/README.md).
#include <cstddef>
#include <cstdint>
#include <string>

#include "tests/fuzz/safetensors_target.h"
#include "tools/fuzz/fuzzer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = tetra::fuzz::ScratchPath("input.safetensors");
  tetra::fuzz::Check(tetra::testing::SafetensorsProblem(tetra::fuzz::Bytes(data, size), path));
  return 0;
}
