// The gtest side of the parser fuzz tests: one campaign runs a parser's check
// (a function returning "" when the parser handled an input correctly, else
// what went wrong) over the valid corpus, every truncation of its small
// entries, seeded mutations and the regression corpus in
// tests/fuzz/corpus/<parser>/. The checks themselves live in
// tests/fuzz/<parser>_target.h, shared with the libFuzzer entry points in
// tools/fuzz/.
#ifndef TETRA_TESTS_FUZZ_FUZZ_CAMPAIGN_H_
#define TETRA_TESTS_FUZZ_FUZZ_CAMPAIGN_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/fuzzing.h"

namespace tetra::testing {

struct FuzzCampaign {
  std::string parser;               // names tests/fuzz/corpus/<parser>/
  std::vector<std::string> corpus;  // valid inputs made by tetra's writers
  uint64_t seed = 1;
  int mutations = 2000;
  size_t max_truncated_bytes = 4096;  // entries up to this size are cut at every length
  std::function<std::string(const std::string& input)> problem = nullptr;
  // Replaces Mutator::Next for some inputs (format-aware mutations); optional.
  std::function<std::string(Mutator& mutator)> mutate = nullptr;
};

inline void Run(const FuzzCampaign& campaign) {
  ASSERT_FALSE(campaign.corpus.empty());
  MaybeExportSeeds(campaign.parser, campaign.corpus);
  int failures = 0;
  auto check = [&](const std::string& input, const std::string& origin) {
    if (failures >= 5) return;  // enough to debug; the rest would repeat them
    const std::string problem = campaign.problem(input);
    if (problem.empty()) return;
    ++failures;
    ADD_FAILURE() << campaign.parser << " input " << origin << " (" << input.size()
                  << " bytes, starting \"" << absl::CHexEscape(input.substr(0, 80))
                  << "\"): " << problem;
  };
  for (size_t i = 0; i < campaign.corpus.size(); ++i) {
    const std::string& entry = campaign.corpus[i];
    check(entry, absl::StrCat("corpus[", i, "]"));
    if (entry.size() > campaign.max_truncated_bytes) continue;
    for (size_t n = 0; n < entry.size(); ++n) {
      check(entry.substr(0, n), absl::StrCat("corpus[", i, "] cut to ", n, " bytes"));
    }
  }
  Mutator mutator(campaign.seed, campaign.corpus);
  for (int i = 0; i < campaign.mutations; ++i) {
    const bool custom = campaign.mutate && mutator.rng().OneIn(2);
    check(custom ? campaign.mutate(mutator) : mutator.Next(),
          absl::StrCat("mutation ", i, " of seed ", campaign.seed));
  }
  for (const auto& [name, input] : RegressionInputs(TETRA_SOURCE_DIR, campaign.parser)) {
    check(input, absl::StrCat("tests/fuzz/corpus/", campaign.parser, "/", name));
  }
}

}  // namespace tetra::testing

#endif  // TETRA_TESTS_FUZZ_FUZZ_CAMPAIGN_H_
