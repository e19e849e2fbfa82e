#include "launch/host_list.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tetra {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(HostListTest, HostfileLinesGiveHostsAndSlots) {
  auto hosts =
      ParseHostfile("# two nodes\nnode1 slots=4\n\n  node2\tslots=2  # spare\nnode3\n", "h");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  ASSERT_EQ(hosts->size(), 3u);
  EXPECT_EQ((*hosts)[0].name, "node1");
  EXPECT_EQ((*hosts)[0].slots, 4);
  EXPECT_EQ((*hosts)[1].name, "node2");
  EXPECT_EQ((*hosts)[1].slots, 2);
  EXPECT_EQ((*hosts)[2].slots, 1);
  EXPECT_EQ(TotalSlots(*hosts), 7);
  EXPECT_EQ(MpirunHostArgument(*hosts, 5), "node1:4,node2:1");
  EXPECT_EQ(MpirunHostArgument(*hosts, 7), "node1:4,node2:2,node3:1");
}

TEST(HostListTest, BadHostfilesAreRefusedNamingTheLine) {
  EXPECT_THAT(ParseHostfile("a slots=0\n", "hosts.txt").status().message(),
              HasSubstr("hosts.txt line 1"));
  EXPECT_THAT(ParseHostfile("a slots=2\nb cores=3\n", "h").status().message(), HasSubstr("line 2"));
  EXPECT_THAT(ParseHostfile("a\na slots=2\n", "h").status().message(),
              HasSubstr("names a host a second time"));
  EXPECT_THAT(ParseHostfile("# nothing\n", "h").status().message(), HasSubstr("names no host"));
}

TEST(HostListTest, DiscoveredHostsAreHostColonSlotsLines) {
  auto hosts = ParseDiscoveredHosts("node1:4\n\n node2 \n10.0.0.3:2\n", "script");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  ASSERT_EQ(hosts->size(), 3u);
  EXPECT_EQ((*hosts)[0].name, "node1");
  EXPECT_EQ((*hosts)[0].slots, 4);
  EXPECT_EQ((*hosts)[1].name, "node2");
  EXPECT_EQ((*hosts)[1].slots, 1);
  EXPECT_EQ((*hosts)[2].name, "10.0.0.3");
  EXPECT_EQ((*hosts)[2].slots, 2);
  EXPECT_TRUE(ParseDiscoveredHosts("\n", "script")->empty());  // every host away for now
  EXPECT_THAT(ParseDiscoveredHosts("a:0\n", "script").status().message(),
              HasSubstr("script line 1"));
  EXPECT_THAT(ParseDiscoveredHosts("a:2\na:3\n", "script").status().message(), HasSubstr("line 2"));
  EXPECT_FALSE(ParseDiscoveredHosts(":4\n", "script").ok());
}

TEST(HostListTest, SlurmNodelistsExpandWithTheirPadding) {
  auto nodes = ExpandSlurmNodelist("gpu[01-03,07],login2,a[9-10]");
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  EXPECT_THAT(*nodes, ElementsAre("gpu01", "gpu02", "gpu03", "gpu07", "login2", "a9", "a10"));
  EXPECT_THAT(*ExpandSlurmNodelist("node7"), ElementsAre("node7"));
  EXPECT_FALSE(ExpandSlurmNodelist("gpu[3-1]").ok());
  EXPECT_FALSE(ExpandSlurmNodelist("gpu[1-2").ok());
  EXPECT_FALSE(ExpandSlurmNodelist("").ok());
}

}  // namespace
}  // namespace tetra
