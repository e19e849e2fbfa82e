// Runs a kernel's grid on the calling host thread (a stream worker): block
// after block, each CUDA thread of a block a fiber (Boost.Context). A fiber
// runs until it reaches a barrier or a warp operation, and the block's
// threads are resumed in an order shuffled from the launch's seed, so code
// missing a __syncthreads reads what another thread has not written yet. The
// rules the hardware enforces at these points are checked: every lane named
// in a warp operation's mask reaches the same operation with the same mask,
// a shuffle reads only lanes in the mask, a barrier is not left waiting.
#ifndef TETRA_EMULATOR_KERNEL_ENGINE_H_
#define TETRA_EMULATOR_KERNEL_ENGINE_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <string>

namespace tetra::emulator {

struct KernelRun {
  std::string name;
  dim3 grid, block;
  size_t shared_bytes;         // dynamic shared memory per block
  std::function<void()> body;  // one CUDA thread: the kernel called with its arguments
  uint64_t seed;               // of the threads' order
};

void RunKernel(const KernelRun& run);

}  // namespace tetra::emulator

#endif  // TETRA_EMULATOR_KERNEL_ENGINE_H_
