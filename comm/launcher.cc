#include "comm/launcher.h"

#include <algorithm>
#include <cstdlib>
#include <initializer_list>

namespace tetra {
namespace {

// The first of `names` set in the environment, else `fallback`.
int FirstSet(std::initializer_list<const char*> names, int fallback) {
  for (const char* name : names) {
    if (const char* value = std::getenv(name)) return std::atoi(value);
  }
  return fallback;
}

}  // namespace

int LaunchedWorldSize() {
  return std::max(1, FirstSet({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}, 1));
}

int LaunchedRank() {
  return std::max(0, FirstSet({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}, 0));
}

int RanksOnThisMachine() {
  return std::max(1, FirstSet({"OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"}, 1));
}

int LocalRank() {
  return std::max(0, FirstSet({"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}, 0));
}

}  // namespace tetra
