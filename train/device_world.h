// Which GPU a rank computes on and which backend carries its tensors
// (parallel.comm_backend), decided once at start-up, before the groups are
// split from the world it returns:
//
//   device  backend          GPU                    world
//   CPU     AUTO             -                      MPI
//   CPU     MPI              -                      staged (NCCL's rules checked)
//   CUDA    NCCL             local rank             NCCL (+ MPI for host tensors)
//   CUDA    MPI              local rank % GPUs      staged through pinned memory
//   CUDA    AUTO             NCCL when each rank on the machine has its own
//                            GPU, else MPI with a warning
//
// A world of one rank moves nothing and stays as it is.
#ifndef TETRA_TRAIN_DEVICE_WORLD_H_
#define TETRA_TRAIN_DEVICE_WORLD_H_

#include <memory>
#include <ostream>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "proto/config.pb.h"

namespace tetra {

// Makes this rank's GPU current (train.device CUDA) and wraps `world` (MPI,
// or a group of one) in the backend the table names; warnings go to
// `progress` from world rank 0. Collective over `world`. A machine without
// GPUs, or NCCL asked for with more ranks than GPUs or not installed, is a
// user error on every rank.
absl::StatusOr<std::unique_ptr<Communicator>> MakeTrainingWorld(const TrainerConfig& config,
                                                                std::unique_ptr<Communicator> world,
                                                                std::ostream& progress);

}  // namespace tetra

#endif  // TETRA_TRAIN_DEVICE_WORLD_H_
