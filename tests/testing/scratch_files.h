// Scratch files shared by the tests that write and read real files (data
// shards, checkpoints, CLI outputs): a per-process scratch directory removed
// when the test program ends, and whole-file byte reads and writes.
#ifndef TETRA_TESTS_TESTING_SCRATCH_FILES_H_
#define TETRA_TESTS_TESTING_SCRATCH_FILES_H_

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <utility>

#include "gtest/gtest.h"

namespace tetra::testing {

// "<::testing::TempDir()><test_file>_<pid>", created on first use. The pid
// keeps parallel test processes apart; the directory and everything in it are
// removed when the test program ends.
inline const std::string& ScratchDir(const std::string& test_file) {
  // Leaked on purpose: cleanup runs after the tests, before static destruction.
  static auto* dirs = new std::map<std::string, std::string>;
  auto [it, inserted] = dirs->try_emplace(test_file);
  if (inserted) {
    it->second = ::testing::TempDir() + test_file + "_" + std::to_string(getpid());
    std::filesystem::create_directories(it->second);
    struct Cleanup : ::testing::Environment {
      explicit Cleanup(std::string dir) : dir(std::move(dir)) {}
      void TearDown() override { std::filesystem::remove_all(dir); }
      std::string dir;
    };
    ::testing::AddGlobalTestEnvironment(new Cleanup(it->second));
  }
  return it->second;
}

// The whole file at `path`; empty if it cannot be read.
inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Replaces the file at `path` with exactly `bytes`; a failed write fails the test.
inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

}  // namespace tetra::testing

#endif  // TETRA_TESTS_TESTING_SCRATCH_FILES_H_
