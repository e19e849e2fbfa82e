// Column blocks of row-major matrices on the device (ops::ConcatColumns and
// ops::SplitColumns): one strided 2-D copy on the current stream.
#include <cuda_runtime.h>

#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"
#include "core/device_work.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/expect_device.h"

namespace tetra::cuda {

void CopyColumns(const Tensor& src, int64_t src_column, const Tensor& dst, int64_t dst_column,
                 int64_t columns) {
  ExpectDevice(src, "CopyColumns", "src");
  ExpectDevice(dst, "CopyColumns", "dst");
  const size_t element = DTypeSize(src.dtype());
  const int64_t rows = src.numel() / src.dim(-1);
  if (rows == 0 || columns == 0) return;
  CountDeviceWork(DeviceWork::kLaunch);
  TETRA_CUDA_CHECK(cudaMemcpy2DAsync(
      static_cast<char*>(dst.raw()) + dst_column * element, dst.dim(-1) * element,
      static_cast<const char*>(src.raw()) + src_column * element, src.dim(-1) * element,
      columns * element, rows, cudaMemcpyDeviceToDevice, CurrentStream()));
}

}  // namespace tetra::cuda
