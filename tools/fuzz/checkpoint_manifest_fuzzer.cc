// libFuzzer entry point for the checkpoint manifest reader: each input is a
// manifest.pb, checked as tests/fuzz/checkpoint_manifest_target.h says, in a
// directory holding the data file named by TETRA_FUZZ_CHECKPOINT_DATA (the
// checkpoint fuzz test exports both; see tools/fuzz/README.md).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "tests/fuzz/checkpoint_manifest_target.h"
#include "tools/fuzz/fuzzer.h"

namespace {

std::string MakeCheckpointDir() {
  const std::string dir = tetra::fuzz::ScratchPath("checkpoint");
  std::filesystem::create_directories(dir);
  const char* data = std::getenv("TETRA_FUZZ_CHECKPOINT_DATA");
  if (data == nullptr) {
    std::fprintf(stderr, "set TETRA_FUZZ_CHECKPOINT_DATA to a file named rank_00000.bin\n");
    std::abort();
  }
  std::filesystem::copy_file(data, dir + "/rank_00000.bin",
                             std::filesystem::copy_options::overwrite_existing);
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = MakeCheckpointDir();
  tetra::fuzz::Check(
      tetra::testing::CheckpointManifestProblem(tetra::fuzz::Bytes(data, size), dir));
  return 0;
}
