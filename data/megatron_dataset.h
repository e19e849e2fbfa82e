// Megatron-LM indexed data sets (megatron/core/datasets/indexed_dataset.py,
// the "MMIDIDX" layout): `<prefix>.bin` holds the tokens of every sequence and
// `<prefix>.idx` describes them, all little-endian:
//   9 bytes "MMIDIDX\0\0", uint64 version (1), uint8 dtype code,
//   uint64 sequence count S, uint64 document count D,
//   int32 sequence lengths [S] (tokens), int64 sequence pointers [S] (byte
//   offsets into .bin), int64 document indices [D] (0, then the sequence index
//   ending each document).
// The TokenStream is all sequences in index order, back to back (Megatron's
// GPT data set concatenates documents the same way).
#ifndef TETRA_DATA_MEGATRON_DATASET_H_
#define TETRA_DATA_MEGATRON_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/token_stream.h"

namespace tetra {

// Megatron's DType codes; the float ones (6, 7) are not token types.
enum MegatronDtype : uint8_t {
  kMegatronUint8 = 1,
  kMegatronInt8 = 2,
  kMegatronInt16 = 3,
  kMegatronInt32 = 4,
  kMegatronInt64 = 5,
  kMegatronFloat64 = 6,
  kMegatronFloat32 = 7,
  kMegatronUint16 = 8,
};

// Opens `<prefix>.idx` and `<prefix>.bin` and checks that the index is whole
// and every sequence lies inside the .bin file.
absl::StatusOr<std::unique_ptr<TokenStream>> OpenMegatronDataset(const std::string& prefix);

// Writes each of `sequences` as one sequence and one document, tokens stored
// as `dtype_code` (an integer code); a token that does not fit is an error.
absl::Status WriteMegatronDataset(const std::string& prefix,
                                  const std::vector<std::vector<int32_t>>& sequences,
                                  int dtype_code);

}  // namespace tetra

#endif  // TETRA_DATA_MEGATRON_DATASET_H_
