#include "model/rotary_table.h"

namespace tetra {

const RopeTable& RotaryTable::For(int64_t seq) {
  if (table_.seq != seq) {
    table_ = MakeRopeTable(seq, rotary_dim_, theta_, scaling_);
    if (context_.size > 1) {
      // The rows of the whole sequences' table at this rank's two chunks.
      const int64_t whole = seq * context_.size, chunk = context_.ChunkLength(whole);
      const RopeTable full = MakeRopeTable(whole, rotary_dim_, theta_, scaling_);
      for (int c = 0; c < 2; ++c) {
        const int64_t from = context_.ChunkStart(c, whole);
        table_.cos.Slice(c * chunk, (c + 1) * chunk).CopyFrom(full.cos.Slice(from, from + chunk));
        table_.sin.Slice(c * chunk, (c + 1) * chunk).CopyFrom(full.sin.Slice(from, from + chunk));
      }
    }
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
