// libFuzzer entry point for the config text format (ParseConfigText): each
// input gets the check of tests/fuzz/config_target.h (see tools/fuzz/README.md).
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/config_target.h"
#include "tools/fuzz/fuzzer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tetra::fuzz::Check(tetra::testing::ConfigTextProblem(tetra::fuzz::Bytes(data, size)));
  return 0;
}
