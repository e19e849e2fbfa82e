// NCCL, loaded when the first NCCL communicator is made rather than linked:
// tetra then starts, and runs every CPU job, on a machine without NCCL (the
// GPU bundle leaves it out: a GPU machine has it in its toolkit or in the
// nvidia-nccl Python wheel, on LD_LIBRARY_PATH).
#ifndef TETRA_COMM_CUDA_NCCL_LIBRARY_H_
#define TETRA_COMM_CUDA_NCCL_LIBRARY_H_

#include <nccl.h>

#include "absl/status/statusor.h"

namespace tetra {

// The NCCL calls tetra makes, resolved from libnccl.so.2.
struct NcclLibrary {
  decltype(&ncclGetUniqueId) GetUniqueId;
  decltype(&ncclCommInitRank) CommInitRank;
  decltype(&ncclCommDestroy) CommDestroy;
  decltype(&ncclCommAbort) CommAbort;
  decltype(&ncclCommGetAsyncError) CommGetAsyncError;
  decltype(&ncclGetErrorString) GetErrorString;
  decltype(&ncclGetLastError) GetLastError;
  decltype(&ncclAllReduce) AllReduce;
  decltype(&ncclReduceScatter) ReduceScatter;
  decltype(&ncclAllGather) AllGather;
  decltype(&ncclBroadcast) Broadcast;
  decltype(&ncclSend) Send;
  decltype(&ncclRecv) Recv;
  decltype(&ncclGroupStart) GroupStart;
  decltype(&ncclGroupEnd) GroupEnd;
};

// Loads NCCL (libnccl.so.2) once per process; a UserError saying how to
// provide it when the library or one of its symbols is missing.
absl::StatusOr<const NcclLibrary*> LoadNccl();
// What LoadNccl does, from the shared library `file` (for tests).
absl::StatusOr<NcclLibrary> OpenNcclLibrary(const char* file);

// LoadNccl()'s library, which the caller has loaded (fatal otherwise).
const NcclLibrary& Nccl();

}  // namespace tetra

#endif  // TETRA_COMM_CUDA_NCCL_LIBRARY_H_
