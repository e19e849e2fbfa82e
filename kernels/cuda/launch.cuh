// Every kernel launch goes through LaunchKernel: nvcc's <<<grid, block,
// shared_bytes, stream>>> on the device, the emulated device's launch in the
// emulated build (TETRA_EMULATED_GPU: the .cu sources compiled for the host,
// emulator/), then the launch's error check. Dynamic shared memory is named
// through TETRA_DYNAMIC_SHARED for the same reason.
#ifndef TETRA_KERNELS_CUDA_LAUNCH_CUH_
#define TETRA_KERNELS_CUDA_LAUNCH_CUH_

#include <cuda_runtime.h>

#include <utility>

#include "core/cuda/cuda_check.h"
#include "core/device_work.h"

#if TETRA_EMULATED_GPU
#include <type_traits>

#include "emulator/kernel_launch.h"
#endif

namespace tetra::cuda {

template <typename... Params, typename... Args>
void LaunchKernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                  cudaStream_t stream, Args&&... args) {
#if TETRA_EMULATED_GPU
  // Arguments are copied once, converted to the parameters' types, as a launch does.
  emulator::LaunchKernel(reinterpret_cast<const void*>(kernel), grid, block, shared_bytes, stream,
                         [kernel, ... params = static_cast<std::decay_t<Params>>(
                                      std::forward<Args>(args))] { kernel(params...); });
#else
  kernel<<<grid, block, shared_bytes, stream>>>(std::forward<Args>(args)...);
#endif
  TETRA_CUDA_CHECK_LAUNCH();
  CountDeviceWork(DeviceWork::kLaunch);
}

}  // namespace tetra::cuda

// `extern __shared__ T name[]`: the block's dynamic shared memory as T*.
#if TETRA_EMULATED_GPU
#define TETRA_DYNAMIC_SHARED(T, name) \
  T* const name = static_cast<T*>(::tetra::emulator::DynamicSharedMemory())
#else
#define TETRA_DYNAMIC_SHARED(T, name) extern __shared__ T name[]
#endif

#endif  // TETRA_KERNELS_CUDA_LAUNCH_CUH_
