// libFuzzer entry point for OpenLlmcShard: each input gets the check of
// tests/fuzz/llmc_shard_target.h (see tools/fuzz/README.md).
#include <cstddef>
#include <cstdint>
#include <string>

#include "tests/fuzz/llmc_shard_target.h"
#include "tools/fuzz/fuzzer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = tetra::fuzz::ScratchPath("input.bin");
  tetra::fuzz::Check(tetra::testing::LlmcShardProblem(tetra::fuzz::Bytes(data, size), path));
  return 0;
}
