#include "parallel/context_shard.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "core/user_error.h"

namespace tetra {

absl::Status CheckContextParallel(const TrainerConfig& config, int cp) {
  if (cp == 1) return absl::OkStatus();
  const int64_t seq = config.train().seq_length();
  if (seq % (2 * cp) != 0) {
    return UserError(
        absl::StrCat("train.seq_length ", seq, " is not a multiple of 2 x parallel.context ", cp,
                     " = ", 2 * cp,
                     ": context parallelism cuts each sequence into 2 x context equal chunks"),
        absl::StrCat("use a seq_length that is a multiple of ", 2 * cp,
                     ", or a parallel.context whose double divides ", seq));
  }
  if (const int depths = config.model().num_nextn_predict_layers(); depths > 0) {
    return UserError(
        absl::StrCat("model.num_nextn_predict_layers ", depths, " with parallel.context ", cp,
                     ": multi-token prediction under context parallelism is not implemented yet"),
        "set parallel.context to 1, or model.num_nextn_predict_layers to 0");
  }
  return absl::OkStatus();
}

int64_t ContextShard::ChunkStart(int chunk, int64_t seq) const {
  TETRA_CHECK(chunk == 0 || chunk == 1) << "chunk " << chunk;
  return (chunk == 0 ? rank : 2 * size - 1 - rank) * ChunkLength(seq);
}

void ContextShard::SelectTokens(const int32_t* full, int64_t batch, int64_t seq,
                                int32_t* local) const {
  TETRA_CHECK(size == 1 || seq % (2 * size) == 0)
      << "sequence of " << seq << " tokens for context " << size;
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
