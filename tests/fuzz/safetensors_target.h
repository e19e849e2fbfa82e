// The check of one safetensors fuzz input (the gtest campaign and
// tools/fuzz/safetensors_fuzzer.cc): SafetensorsFile::Open either fails with
// a short UserError or accepts a file that an independent reading of its
// header confirms: every tensor's bytes inside the data buffer, sized by its
// shape and dtype, the tensors tiling the buffer (no overlaps, no holes, no
// trailing bytes), and every F32/BF16/F16 tensor reading back its bytes.
#ifndef TETRA_TESTS_FUZZ_SAFETENSORS_TARGET_H_
#define TETRA_TESTS_FUZZ_SAFETENSORS_TARGET_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/safetensors.h"
#include "core/json.h"
#include "tests/testing/fuzzing.h"

namespace tetra::testing {

// Bits per element of the dtypes the format defines, by hand; 0 if unknown.
inline int SafetensorsDtypeBits(const std::string& name) {
  static const std::vector<std::pair<std::string, int>> kBits = {
      {"F64", 64},    {"I64", 64},    {"U64", 64},    {"C64", 64},    {"F32", 32},
      {"I32", 32},    {"U32", 32},    {"F16", 16},    {"BF16", 16},   {"I16", 16},
      {"U16", 16},    {"I8", 8},      {"U8", 8},      {"BOOL", 8},    {"F8_E4M3", 8},
      {"F8_E5M2", 8}, {"F8_E8M0", 8}, {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"F4", 4}};
  for (const auto& [dtype, bits] : kBits) {
    if (dtype == name) return bits;
  }
  return 0;
}

// What Open accepted that it should not have, "" if the file is sound.
inline std::string AcceptedSafetensorsProblem(const std::string& bytes,
                                              const SafetensorsFile& file) {
  uint64_t header_size;
  std::memcpy(&header_size, bytes.data(), 8);
  const std::string_view header(bytes.data() + 8, header_size);
  const uint64_t data_size = bytes.size() - 8 - header_size;
  absl::StatusOr<JsonValue> root = ParseJson(header);
  if (!root.ok()) return "accepted a header that is not JSON";
  std::vector<std::tuple<uint64_t, uint64_t, std::string>> ranges;  // begin, end, name
  for (size_t i = 0; i < root->keys.size(); ++i) {
    if (root->keys[i] == "__metadata__") continue;
    const std::string& name = root->keys[i];
    const JsonValue& t = root->items[i];
    const SafetensorsEntry* entry = file.Find(name);
    if (entry == nullptr) return "a header tensor is missing from entries()";
    const JsonValue* offsets = t.Find("data_offsets");
    const JsonValue* shape = t.Find("shape");
    const JsonValue* dtype = t.Find("dtype");
    if (offsets == nullptr || shape == nullptr || dtype == nullptr) {
      return "accepted a tensor without dtype, shape or data_offsets";
    }
    const int bits = SafetensorsDtypeBits(dtype->string);
    if (bits == 0 || entry->dtype_name != dtype->string) return "accepted an unknown dtype";
    if (entry->shape.size() != shape->items.size()) return "entry shape differs from the header";
    // The product in 128 bits: an overflowing shape must have been refused.
    unsigned __int128 numel = 1;
    for (size_t d = 0; d < shape->items.size(); ++d) {
      if (!shape->items[d].integer || *shape->items[d].integer != entry->shape[d] ||
          entry->shape[d] < 0) {
        return "entry shape differs from the header";
      }
      numel *= static_cast<uint64_t>(entry->shape[d]);
      if (numel > (static_cast<unsigned __int128>(1) << 64)) return "accepted a huge shape";
    }
    if (offsets->items.size() != 2 || !offsets->items[0].integer || !offsets->items[1].integer) {
      return "accepted malformed data_offsets";
    }
    const int64_t begin = *offsets->items[0].integer, end = *offsets->items[1].integer;
    if (begin < 0 || end < begin || static_cast<uint64_t>(end) > data_size) {
      return "accepted data_offsets outside the buffer";
    }
    if (numel * bits != static_cast<unsigned __int128>(end - begin) * 8) {
      return "accepted data_offsets whose size is not the shape's";
    }
    ranges.emplace_back(begin, end, name);
  }
  if (ranges.size() != file.entries().size()) return "entries() has tensors the header lacks";
  std::sort(ranges.begin(), ranges.end());
  uint64_t covered = 0;
  for (const auto& [begin, end, name] : ranges) {
    if (begin != covered) return "accepted tensors that overlap or leave a hole";
    covered = end;
  }
  if (covered != data_size) return "accepted trailing bytes after the last tensor";
  const char* data = bytes.data() + 8 + header_size;
  for (const auto& [begin, end, name] : ranges) {
    const SafetensorsEntry& entry = *file.Find(name);
    const bool readable =
        entry.dtype_name == "F32" || entry.dtype_name == "BF16" || entry.dtype_name == "F16";
    const int64_t n =
        readable ? static_cast<int64_t>((end - begin) / (entry.dtype_name == "F32" ? 4 : 2)) : 1;
    std::vector<float> out(n);
    const absl::Status status = file.ReadF32(name, out.data());
    if (!readable) {
      if (status.ok()) return "ReadF32 converted a dtype it does not read";
      if (std::string p = UserErrorProblem(status, {file.path()}); !p.empty()) return p;
      continue;
    }
    if (!status.ok()) {
      return absl::StrCat("ReadF32 failed on an accepted tensor: ", status.message());
    }
    for (int64_t i = 0; i < n; ++i) {
      uint32_t want;
      if (entry.dtype_name == "F32") {
        std::memcpy(&want, data + begin + 4 * i, 4);
      } else if (entry.dtype_name == "BF16") {
        uint16_t half;
        std::memcpy(&half, data + begin + 2 * i, 2);
        want = uint32_t{half} << 16;
      } else {
        continue;  // F16's conversion is checked by safetensors_test
      }
      uint32_t got;
      std::memcpy(&got, &out[i], 4);
      if (got != want) return "ReadF32 returned other bytes than the file holds";
    }
  }
  return "";
}

// `bytes` written to `path`, then opened.
inline std::string SafetensorsProblem(const std::string& bytes, const std::string& path) {
  if (!WriteWholeFile(path, bytes)) return "cannot write the scratch file " + path;
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  if (!file.ok()) return UserErrorProblem(file.status(), {path});
  return AcceptedSafetensorsProblem(bytes, *file);
}

}  // namespace tetra::testing

#endif  // TETRA_TESTS_FUZZ_SAFETENSORS_TARGET_H_
