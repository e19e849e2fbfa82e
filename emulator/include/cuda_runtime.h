// The emulated device's <cuda_runtime.h>: the runtime API, the vector types
// and, for the .cu sources compiled for the host, the device builtins.
#ifndef TETRA_EMULATOR_INCLUDE_CUDA_RUNTIME_H_
#define TETRA_EMULATOR_INCLUDE_CUDA_RUNTIME_H_

#include "cuda_runtime_api.h"
#include "device_builtins.h"

#endif  // TETRA_EMULATOR_INCLUDE_CUDA_RUNTIME_H_
