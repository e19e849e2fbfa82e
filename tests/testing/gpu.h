// For the `gpu`-labelled tests: skip, with the runtime's reason, where no CUDA
// device is usable (ctest then reports the test skipped, not passed).
#ifndef TETRA_TESTS_TESTING_GPU_H_
#define TETRA_TESTS_TESTING_GPU_H_

#include <string>

#include "core/cuda/device.h"
#include "gtest/gtest.h"

#define TETRA_SKIP_WITHOUT_GPU()                                 \
  do {                                                           \
    std::string tetra_no_gpu_reason;                             \
    if (::tetra::cuda::DeviceCount(&tetra_no_gpu_reason) == 0) { \
      GTEST_SKIP() << "no CUDA device: " << tetra_no_gpu_reason; \
    }                                                            \
  } while (0)

#endif  // TETRA_TESTS_TESTING_GPU_H_
