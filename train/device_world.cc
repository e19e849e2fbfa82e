#include "train/device_world.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "comm/launcher.h"
#include "comm/staged_communicator.h"
#include "core/logging.h"
#include "core/status_macros.h"
#include "core/user_error.h"

#if TETRA_HAVE_CUDA
#include "comm/cuda/nccl_communicator.h"
#include "comm/cuda/nccl_library.h"
#include "core/cuda/device.h"
#endif

namespace tetra {

absl::StatusOr<std::unique_ptr<Communicator>> MakeTrainingWorld(const TrainerConfig& config,
                                                                std::unique_ptr<Communicator> world,
                                                                std::ostream& progress) {
  CommBackend::Value backend = config.parallel().comm_backend();
  if (config.train().device() != Device::CUDA) {
    if (backend == CommBackend::MPI && world->size() > 1)
      return std::make_unique<StagedCommunicator>(std::move(world));
    return world;
  }
#if TETRA_HAVE_CUDA
  std::string why;
  const int devices = cuda::DeviceCount(&why);
  const int ranks_here = RanksOnThisMachine(), local_rank = LocalRank();
  absl::Status usable;
  if (devices == 0) {
    usable = UserError(absl::StrCat("train.device is CUDA, but this rank sees no GPU: ", why),
                       "run on a GPU machine (check nvidia-smi), or set train.device to CPU");
  } else if (backend == CommBackend::NCCL && ranks_here > devices) {
    usable = UserError(
        absl::StrFormat("parallel.comm_backend is NCCL, but %d ranks share this machine's %d GPUs "
                        "and NCCL takes one GPU per rank",
                        ranks_here, devices),
        absl::StrFormat("launch at most %d ranks per machine, or set parallel.comm_backend to MPI "
                        "(staged through host memory: for tests, not speed)",
                        devices));
  }
  RETURN_IF_ERROR(AgreeOnStatus(*world, std::move(usable)));
  if (backend == CommBackend::AUTO) {
    backend = ranks_here <= devices ? CommBackend::NCCL : CommBackend::MPI;
    if (backend == CommBackend::MPI && world->rank() == 0) {
      progress << absl::StrFormat(
          "tetra: warning: %d ranks share this machine's %d GPUs, which NCCL cannot do: tensors "
          "move through "
          "host memory and MPI (parallel.comm_backend MPI), correct but slow; launch one rank per "
          "GPU for speed\n",
          ranks_here, devices);
    }
  }
  cuda::SetDevice(backend == CommBackend::NCCL ? local_rank : local_rank % devices);
  if (world->size() == 1) return world;
  if (backend == CommBackend::MPI) return std::make_unique<StagedCommunicator>(std::move(world));
  RETURN_IF_ERROR(AgreeOnStatus(*world, LoadNccl().status()));
  return std::unique_ptr<Communicator>(NcclCommunicator::OnOwnStream(std::move(world)));
#else
  (void)progress;
  TETRA_CHECK(false) << "train.device CUDA in a build without CUDA (validation lets none through)";
  return world;
#endif
}

}  // namespace tetra
