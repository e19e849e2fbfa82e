// Which rank keeps a copy of each rank's data file (checkpoint.local_dir):
// always a rank on another host, the same place among the next host's ranks.
#include "checkpoint/local_checkpoint.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tetra {
namespace {

using Hosts = std::vector<std::string>;

TEST(BackupRanksTest, EachRankOnTheNextHostAtTheSamePlace) {
  EXPECT_EQ(BackupRanks(Hosts{"a", "a", "b", "b"}), (std::vector<int>{2, 3, 0, 1}));
  EXPECT_EQ(BackupRanks(Hosts{"a", "b", "c"}), (std::vector<int>{1, 2, 0}));
}

TEST(BackupRanksTest, HostsComeInTheOrderOfTheirFirstRank) {
  EXPECT_EQ(BackupRanks(Hosts{"b", "a", "b", "a"}), (std::vector<int>{1, 0, 3, 2}));
}

TEST(BackupRanksTest, UnevenHostsWrapAroundTheNextHostsRanks) {
  EXPECT_EQ(BackupRanks(Hosts{"a", "a", "a", "b"}), (std::vector<int>{3, 3, 3, 0}));
  EXPECT_EQ(BackupRanks(Hosts{"a", "b", "b", "b"}), (std::vector<int>{1, 0, 0, 0}));
}

TEST(BackupRanksTest, OneHostHasNoBackup) {
  EXPECT_EQ(BackupRanks(Hosts{"a"}), (std::vector<int>{-1}));
  EXPECT_EQ(BackupRanks(Hosts{"a", "a", "a"}), (std::vector<int>{-1, -1, -1}));
}

}  // namespace
}  // namespace tetra
