// What the libFuzzer entry points in tools/fuzz/ share: a scratch path per
// process (on tmpfs when there is one, as each input is written to a file) and
// the way a broken rule ends the run, so libFuzzer saves the input.
#ifndef TETRA_TOOLS_FUZZ_FUZZER_H_
#define TETRA_TOOLS_FUZZ_FUZZER_H_

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace tetra::fuzz {

// "<tmpfs or /tmp>/tetra_fuzz_<pid>/<name>", its directory created.
inline std::string ScratchPath(const std::string& name) {
  const std::string root = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
  const std::string dir = root + "/tetra_fuzz_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  return dir + "/" + name;
}

// Aborts with `problem` when it is not empty (a target's verdict on one input).
inline void Check(const std::string& problem) {
  if (problem.empty()) return;
  std::fprintf(stderr, "tetra fuzz target: %s\n", problem.c_str());
  std::abort();
}

inline std::string Bytes(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

}  // namespace tetra::fuzz

#endif  // TETRA_TOOLS_FUZZ_FUZZER_H_
