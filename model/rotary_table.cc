#include "model/rotary_table.h"

namespace tetra {

const RopeTable& RotaryTable::For(int64_t seq) {
  if (table_.seq != seq) {
    table_ = MakeRopeTable(seq, rotary_dim_, theta_, scaling_);
    // The kernels read the table where they run.
    const DeviceType device = CurrentPlacement().device;
    for (Tensor* t : {&table_.cos, &table_.sin}) {
      if (device == DeviceType::kCPU) continue;
      Tensor on_device = Tensor::Empty(t->shape(), DType::kF32, device);
      on_device.CopyFrom(*t);
      *t = on_device;
    }
  }
  return table_;
}

}  // namespace tetra
