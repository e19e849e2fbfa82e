// Which tokens of each sequence a rank of the context-parallel group holds
// (Megatron-LM's causal load balancing): a sequence of T tokens is cut into
// 2 cp chunks of S = T / (2 cp), and rank r holds chunks r and 2 cp - 1 - r,
// in that order. Under a causal mask the first chunk's queries see few keys
// and the second's many, so every rank does the same attention work, and
// the local tokens stay in sequence order (a causal mask over them is the
// right one within the rank).
#ifndef TETRA_PARALLEL_CONTEXT_SHARD_H_
#define TETRA_PARALLEL_CONTEXT_SHARD_H_

#include <cstdint>

#include "absl/status/status.h"
#include "proto/config.pb.h"

namespace tetra {

// Whether the trainer runs `config` with a context group of `cp` ranks:
// train.seq_length a multiple of 2 x cp, and no multi-token prediction
// (not implemented under context parallelism yet). Else a user error naming
// the numbers, with a hint. The config's checks and the planner's both ask.
absl::Status CheckContextParallel(const TrainerConfig& config, int cp);

struct ContextShard {
  int size = 1;  // cp
  int rank = 0;  // in the context group

  // Tokens of a sequence of `seq` this rank holds.
  int64_t LocalSeq(int64_t seq) const { return seq / size; }
  // The first position of local chunk `chunk` (0 or 1) and the chunk's length.
  int64_t ChunkStart(int chunk, int64_t seq) const;
  int64_t ChunkLength(int64_t seq) const { return seq / (2 * size); }
  // local (batch, LocalSeq(seq)) ids = this rank's chunks of each of the
  // batch sequences in full (batch, seq).
  void SelectTokens(const int32_t* full, int64_t batch, int64_t seq, int32_t* local) const;
};

}  // namespace tetra

#endif  // TETRA_PARALLEL_CONTEXT_SHARD_H_
