// Whether a run may resume from a checkpoint: the checkpoint must be this
// run's own (the same model, seed and data as the run that wrote it, from the
// config its manifest stores) and at a step the run can continue from. What
// may change on resume does: the layout (tensor, pipeline, data, expert,
// ZeRO stage: resharding is a feature), train.steps, the LR schedule, the
// log and checkpoint paths. Each refusal names the field and both values.
#ifndef TETRA_CHECKPOINT_CHECKPOINT_COMPATIBILITY_H_
#define TETRA_CHECKPOINT_CHECKPOINT_COMPATIBILITY_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "proto/checkpoint.pb.h"
#include "proto/config.pb.h"

namespace tetra {

// The checkpoint `manifest` at `path`, whose directory's name says step
// `step`, holds that step: resume and `tetra checkpoint inspect` refuse one
// renamed or damaged.
absl::Status CheckStepMatchesName(const CheckpointManifest& manifest, int64_t step,
                                  const std::string& path);

// A checkpoint found at step `step` (its directory's name) of `path` is one a
// run of `config` can continue: at most train.steps (so at most the int
// range that steps count in).
absl::Status CheckResumeStep(const TrainerConfig& config, int64_t step, const std::string& path);

// The checkpoint `manifest` at `path`, found as step `step`, may be resumed by
// a run of `config`: its state is at that step (CheckResumeStep) after the
// samples train.global_batch_size gives, and it was written with this run's
// train.seed, model section and data section (data.valid_path aside).
absl::Status CheckResumable(const TrainerConfig& config, const CheckpointManifest& manifest,
                            int64_t step, const std::string& path);

}  // namespace tetra

#endif  // TETRA_CHECKPOINT_CHECKPOINT_COMPATIBILITY_H_
