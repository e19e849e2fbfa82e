// libFuzzer entry point for ParseJson: each input gets the check of
// tests/fuzz/json_target.h (see tools/fuzz/README.md).
#include <cstddef>
#include <cstdint>
#include <string>

#include "tests/fuzz/json_target.h"
#include "tools/fuzz/fuzzer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tetra::fuzz::Check(tetra::testing::JsonProblem(tetra::fuzz::Bytes(data, size)));
  return 0;
}
