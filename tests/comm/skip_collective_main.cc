// Helper program for watchdog_test (not a test itself): run under mpirun, it
// splits the world into a group named "skippers" and every rank but rank 0
// gets stuck for good instead of joining an all-reduce on it, so rank 0's
// watchdog (2 s) must end the whole job. Each rank first writes its pid to
// DIR/rank<r>.pid (DIR = argv[1]) so the test can check nothing is left running.
#include <unistd.h>

#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "comm/mpi_communicator.h"

int main(int argc, char** argv) {
  tetra::MpiSession session(&argc, &argv);
  if (argc > 1) {
    std::ofstream(std::string(argv[1]) + "/rank" + std::to_string(session.world_rank()) + ".pid")
        << getpid() << "\n";
  }
  constexpr double kTimeoutS = 2;
  std::unique_ptr<tetra::Communicator> world = tetra::MpiWorld(kTimeoutS);
  std::vector<int> everyone(world->size());
  std::iota(everyone.begin(), everyone.end(), 0);
  std::unique_ptr<tetra::Communicator> group = world->Split(everyone, "skippers");
  world->Barrier();
  if (session.world_rank() != 0) {
    for (;;) pause();  // stuck for good: only the watchdog's abort ends the job
  }
  std::vector<float> values(1024, 1.0f);
  const tetra::Tensor view = tetra::Tensor::View(values.data(), {1024}, tetra::DType::kF32);
  group->AllReduce(view, view, tetra::ReduceOp::kSum);
  return 0;
}
