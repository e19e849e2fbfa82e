// The check of one Megatron data set fuzz input (the gtest campaign and
// tools/fuzz/megatron_dataset_fuzzer.cc). An input is both files in one
// string: a little-endian uint32 n, then n bytes of `.idx`, then the `.bin`
// (n beyond the input takes all of it). OpenMegatronDataset either fails with
// a short UserError or accepts a pair that the index, read by hand,
// confirms: the header's magic, version, integer dtype and counts whole, every
// sequence inside the .bin, and the stream reading back exactly the
// sequences' tokens in index order.
#ifndef TETRA_TESTS_FUZZ_MEGATRON_DATASET_TARGET_H_
#define TETRA_TESTS_FUZZ_MEGATRON_DATASET_TARGET_H_

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "data/megatron_dataset.h"
#include "tests/testing/fuzzing.h"

namespace tetra::testing {

inline std::string MegatronInput(const std::string& idx, const std::string& bin) {
  std::string out(4, '\0');
  const auto n = static_cast<uint32_t>(idx.size());
  std::memcpy(out.data(), &n, 4);
  return out + idx + bin;
}

template <typename T>
T LoadAt(const std::string& bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

inline std::string MegatronDatasetProblem(const std::string& input, const std::string& prefix) {
  uint32_t n = 0;
  std::memcpy(&n, input.data(), std::min<size_t>(4, input.size()));
  const std::string rest = input.size() < 4 ? "" : input.substr(4);
  const std::string idx = rest.substr(0, n), bin = rest.substr(std::min<size_t>(n, rest.size()));
  if (!WriteWholeFile(prefix + ".idx", idx) || !WriteWholeFile(prefix + ".bin", bin)) {
    return "cannot write the scratch files " + prefix;
  }
  absl::StatusOr<std::unique_ptr<TokenStream>> stream = OpenMegatronDataset(prefix);
  if (!stream.ok()) {
    return UserErrorProblem(stream.status(), {prefix + ".idx", prefix + ".bin", prefix});
  }

  if (idx.size() < 34 || idx.compare(0, 9, std::string("MMIDIDX\0\0", 9)) != 0 ||
      LoadAt<uint64_t>(idx, 9) != 1) {
    return "accepted a bad header";
  }
  static constexpr int kWidth[] = {0, 1, 1, 2, 4, 8, 0, 0, 2};
  const uint8_t code = LoadAt<uint8_t>(idx, 17);
  if (code > 8 || kWidth[code] == 0) return "accepted a dtype code that is not an integer type";
  const int width = kWidth[code];
  const uint64_t sequences = LoadAt<uint64_t>(idx, 18), documents = LoadAt<uint64_t>(idx, 26);
  // In 128 bits, so a hostile count cannot wrap the check.
  if (34 + static_cast<unsigned __int128>(sequences) * 12 +
          static_cast<unsigned __int128>(documents) * 8 >
      idx.size()) {
    return "accepted counts whose tables do not fit the index";
  }
  std::vector<int32_t> want;
  for (uint64_t i = 0; i < sequences; ++i) {
    const int32_t length = LoadAt<int32_t>(idx, 34 + 4 * i);
    const int64_t pointer = LoadAt<int64_t>(idx, 34 + 4 * sequences + 8 * i);
    if (length < 0 || pointer < 0 ||
        static_cast<unsigned __int128>(pointer) + static_cast<uint64_t>(length) * width >
            bin.size()) {
      return "accepted a sequence outside the .bin";
    }
    if (want.size() + length > (size_t{1} << 24)) return "";  // bounded by the .bin: fine, stop
    for (int32_t k = 0; k < length; ++k) {
      const size_t at = pointer + static_cast<size_t>(k) * width;
      int64_t value = 0;
      switch (code) {
        case 1:
          value = LoadAt<uint8_t>(bin, at);
          break;
        case 2:
          value = LoadAt<int8_t>(bin, at);
          break;
        case 3:
          value = LoadAt<int16_t>(bin, at);
          break;
        case 4:
          value = LoadAt<int32_t>(bin, at);
          break;
        case 5:
          value = LoadAt<int64_t>(bin, at);
          break;
        case 8:
          value = LoadAt<uint16_t>(bin, at);
          break;
      }
      want.push_back(static_cast<int32_t>(std::clamp<int64_t>(value, INT32_MIN, INT32_MAX)));
    }
  }
  if ((*stream)->size() != static_cast<int64_t>(want.size())) {
    return "the stream's size is not the sum of lengths";
  }
  std::vector<int32_t> got(want.size());
  if (!(*stream)->Read(0, static_cast<int64_t>(got.size()), got.data()).ok()) {
    return "reading the accepted tokens failed";
  }
  if (got != want) return "the stream's tokens are not the sequences' in index order";
  return "";
}

}  // namespace tetra::testing

#endif  // TETRA_TESTS_FUZZ_MEGATRON_DATASET_TARGET_H_
