// `tetra checkpoint inspect DIR`: prints a checkpoint's manifest (step,
// layout that wrote it, model, every tensor with its shards) and reads every
// shard, checking its CRC-32C and that the shards cover every tensor; a
// damaged one is an error naming the file and the tensor.
// `tetra checkpoint export DIR --out model.safetensors [--dtype f32|bf16]`:
// writes the checkpoint's global weights with their Hugging Face names.
// DIR is a step directory, or a checkpoint.dir (its newest complete step).
#ifndef TETRA_TOOLS_CHECKPOINT_COMMAND_H_
#define TETRA_TOOLS_CHECKPOINT_COMMAND_H_

#include "absl/status/status.h"

namespace tetra {

// Runs `tetra checkpoint` on argv[2..argc); writes to stdout.
absl::Status CheckpointCommand(int argc, char** argv);

}  // namespace tetra

#endif  // TETRA_TOOLS_CHECKPOINT_COMMAND_H_
