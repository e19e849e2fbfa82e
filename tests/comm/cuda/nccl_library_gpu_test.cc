// NCCL is loaded at run time (comm/cuda/nccl_library.h), so tetra starts
// where it is missing; where it is present every call tetra makes resolves.
// Loading needs no GPU, so these run on any machine of a CUDA build (the
// first skips, saying why, where NCCL's library is not installed).
#include <string>

#include "comm/cuda/nccl_library.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tetra {
namespace {

using ::testing::HasSubstr;

TEST(NcclLibraryTest, ResolvesEveryCallTetraMakes) {
  const absl::StatusOr<const NcclLibrary*> nccl = LoadNccl();
  if (!nccl.ok()) GTEST_SKIP() << nccl.status().message();
  const NcclLibrary& n = **nccl;
  for (const void* call :
       {reinterpret_cast<const void*>(n.GetUniqueId), reinterpret_cast<const void*>(n.CommInitRank),
        reinterpret_cast<const void*>(n.CommDestroy), reinterpret_cast<const void*>(n.CommAbort),
        reinterpret_cast<const void*>(n.CommGetAsyncError),
        reinterpret_cast<const void*>(n.GetLastError), reinterpret_cast<const void*>(n.AllReduce),
        reinterpret_cast<const void*>(n.ReduceScatter), reinterpret_cast<const void*>(n.AllGather),
        reinterpret_cast<const void*>(n.Broadcast), reinterpret_cast<const void*>(n.Send),
        reinterpret_cast<const void*>(n.Recv), reinterpret_cast<const void*>(n.GroupStart),
        reinterpret_cast<const void*>(n.GroupEnd)}) {
    EXPECT_NE(call, nullptr);
  }
  // A call into the loaded library that needs no device.
  EXPECT_THAT(std::string(n.GetErrorString(ncclInvalidArgument)), HasSubstr("invalid argument"));
}

TEST(NcclLibraryTest, AMissingLibraryIsAUserErrorSayingHowToProvideIt) {
  const absl::StatusOr<NcclLibrary> nccl = OpenNcclLibrary("libnccl_not_installed.so.2");
  ASSERT_FALSE(nccl.ok());
  EXPECT_THAT(std::string(nccl.status().message()),
              HasSubstr("libnccl_not_installed.so.2 cannot be loaded"));
  EXPECT_THAT(std::string(nccl.status().message()), HasSubstr("LD_LIBRARY_PATH"));
}

TEST(NcclLibraryTest, ALibraryWithoutNcclsCallsIsRefusedNamingTheFirstMissing) {
  const absl::StatusOr<NcclLibrary> nccl = OpenNcclLibrary("libz.so.1");
  ASSERT_FALSE(nccl.ok());
  EXPECT_THAT(std::string(nccl.status().message()),
              HasSubstr("libz.so.1 found has no ncclGetUniqueId"));
}

}  // namespace
}  // namespace tetra
