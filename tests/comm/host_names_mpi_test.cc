// Every rank's host name by rank: under mpirun on one machine each entry is
// this machine's name, as gethostname gives it.
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/host_names.h"
#include "comm/mpi_communicator.h"
#include "gtest/gtest.h"

namespace tetra {
namespace {

TEST(HostNamesMpiTest, EveryRankHasThisMachinesName) {
  const std::unique_ptr<Communicator> world = MpiWorld(60);
  char host[256] = {0};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  const std::vector<std::string> names = HostNames(*world);
  ASSERT_EQ(static_cast<int>(names.size()), world->size());
  for (const std::string& name : names) EXPECT_EQ(name, std::string(host).substr(0, 63));
}

}  // namespace
}  // namespace tetra
