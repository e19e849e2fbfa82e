// Configs for the tests of layers below train/ (which owns the loader and its
// checks, so they cannot link it): text format parsed by protobuf itself,
// recipes read from configs/, and `--set`-style dotted assignments merged as
// text ("model.hidden_size=64" is `model { hidden_size: 64 }`).
#ifndef TETRA_TESTS_TESTING_CONFIGS_H_
#define TETRA_TESTS_TESTING_CONFIGS_H_

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "proto/config.pb.h"

namespace tetra::testing {

inline TrainerConfig ConfigFromText(const std::string& text) {
  TrainerConfig config;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &config)) << text;
  return config;
}

// configs/<name>, e.g. "tiny_dense.textproto".
inline TrainerConfig RecipeConfig(const std::string& name) {
  std::ifstream file(std::string(TETRA_SOURCE_DIR) + "/configs/" + name);
  EXPECT_TRUE(file.good()) << name;
  std::stringstream text;
  text << file.rdbuf();
  return ConfigFromText(text.str());
}

// "a.b.c=value" merged into *config as `a { b { c: value } }`.
inline void SetField(TrainerConfig* config, const std::string& assignment) {
  const std::vector<std::string> sides = absl::StrSplit(assignment, absl::MaxSplits('=', 1));
  ASSERT_EQ(sides.size(), 2u) << assignment;
  const std::vector<std::string> path = absl::StrSplit(sides[0], '.');
  std::string text;
  for (size_t i = 0; i + 1 < path.size(); ++i) text += path[i] + " { ";
  text += path.back() + ": " + sides[1];
  for (size_t i = 0; i + 1 < path.size(); ++i) text += " }";
  EXPECT_TRUE(google::protobuf::TextFormat::MergeFromString(text, config)) << assignment;
}

}  // namespace tetra::testing

#endif  // TETRA_TESTS_TESTING_CONFIGS_H_
