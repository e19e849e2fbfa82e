#include "parallel/context_shard.h"

#include <algorithm>

#include "core/logging.h"

namespace tetra {

int64_t ContextShard::ChunkStart(int chunk, int64_t seq) const {
  TETRA_CHECK(chunk == 0 || chunk == 1) << "chunk " << chunk;
  return (chunk == 0 ? rank : 2 * size - 1 - rank) * ChunkLength(seq);
}

int64_t ContextShard::GlobalPosition(int64_t local, int64_t seq) const {
  if (size == 1) return local;
  const int64_t chunk = ChunkLength(seq);
  return ChunkStart(static_cast<int>(local / chunk), seq) + local % chunk;
}

void ContextShard::SelectTokens(const int32_t* full, int64_t batch, int64_t seq, int32_t* local) const {
  TETRA_CHECK(size == 1 || seq % (2 * size) == 0) << "sequence of " << seq << " tokens for context " << size;
  if (size == 1) {
    std::copy(full, full + batch * seq, local);
    return;
  }
  const int64_t chunk = ChunkLength(seq);
  for (int64_t b = 0; b < batch; ++b) {
    for (int c = 0; c < 2; ++c) {
      const int32_t* from = full + b * seq + ChunkStart(c, seq);
      std::copy(from, from + chunk, local + (b * 2 + c) * chunk);
    }
  }
}

}  // namespace tetra
