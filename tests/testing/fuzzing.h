// The parser fuzz tests' shared pieces (tests/fuzz/, and the libFuzzer entry
// points in tools/fuzz/): seeded mutations of valid inputs, the rule every
// parser error must meet, and the regression corpus of inputs that once broke
// a parser.
//
// Mutations are a pure function of the seed (splitmix64, not the std::
// distributions, whose results differ between standard libraries), so a
// failure reproduces everywhere from the seed and iteration printed with it.
#ifndef TETRA_TESTS_TESTING_FUZZING_H_
#define TETRA_TESTS_TESTING_FUZZING_H_

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

#if defined(__SANITIZE_ADDRESS__)
#define TETRA_TESTING_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TETRA_TESTING_ASAN 1
#endif
#endif
#ifndef TETRA_TESTING_ASAN
#define TETRA_TESTING_ASAN 0
#endif

namespace tetra::testing {

class FuzzRng {
 public:
  explicit FuzzRng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {  // splitmix64
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n), n > 0 (the modulo bias is irrelevant here).
  uint64_t Below(uint64_t n) { return Next() % n; }
  bool OneIn(uint64_t n) { return Below(n) == 0; }

 private:
  uint64_t state_;
};

// Values that break integer fields: the edges of int32 and int64, 2^62 (whose
// products overflow), and sizes just past the input's own length (a length
// field pointing past the end).
inline std::vector<int64_t> InterestingIntegers(size_t input_size) {
  const auto size = static_cast<int64_t>(input_size);
  return {0,
          1,
          -1,
          2,
          255,
          256,
          65535,
          65536,
          std::numeric_limits<int32_t>::max(),
          int64_t{1} << 31,
          int64_t{1} << 32,
          int64_t{1} << 62,
          std::numeric_limits<int64_t>::max(),
          std::numeric_limits<int64_t>::min(),
          size,
          size + 1,
          size * 2,
          size / 2};
}

// Mutates byte strings (binary files, JSON and text-format texts): each
// Mutate applies 1 to 4 of bit flips, byte inserts and deletes, truncation,
// splicing with another corpus entry, a little-endian integer field (1, 2, 4
// or 8 bytes at any offset) set to an interesting value, a decimal number in
// text replaced by one, a duplicated slice (duplicated keys and records) and,
// rarely, a string grown by up to 1 MB (huge keys).
class Mutator {
 public:
  Mutator(uint64_t seed, std::vector<std::string> corpus)
      : rng_(seed), corpus_(std::move(corpus)) {}

  FuzzRng& rng() { return rng_; }

  // A mutation of a random corpus entry.
  std::string Next() { return Mutate(corpus_[rng_.Below(corpus_.size())]); }

  std::string Mutate(std::string s) {
    const int count = 1 + static_cast<int>(rng_.Below(4));
    for (int i = 0; i < count; ++i) MutateOnce(&s);
    return s;
  }

  void MutateOnce(std::string* s) {
    switch (rng_.Below(s->empty() ? 2 : 9)) {
      case 0:
        InsertBytes(s);
        break;
      case 1:
        Splice(s);
        break;
      case 2:
        FlipBit(s);
        break;
      case 3:
        DeleteBytes(s);
        break;
      case 4:
        s->resize(rng_.Below(s->size()));  // truncate
        break;
      case 5:
        OverwriteInteger(s);
        break;
      case 6:
        ReplaceNumberText(s);
        break;
      case 7:
        DuplicateSlice(s);
        break;
      case 8:
        if (rng_.OneIn(16)) {
          GrowString(s);
        } else {
          FlipBit(s);
        }
        break;
    }
  }

  void FlipBit(std::string* s) {
    if (s->empty()) return;
    (*s)[rng_.Below(s->size())] ^= static_cast<char>(1 << rng_.Below(8));
  }

  void InsertBytes(std::string* s) {
    const size_t at = rng_.Below(s->size() + 1);
    std::string bytes(1 + rng_.Below(8), '\0');
    static constexpr char kText[] = "{}[]\":,-.0123456789eE \\u";
    for (char& c : bytes) {
      c = rng_.OneIn(2) ? kText[rng_.Below(sizeof(kText) - 1)] : static_cast<char>(rng_.Next());
    }
    s->insert(at, bytes);
  }

  void DeleteBytes(std::string* s) {
    const size_t at = rng_.Below(s->size());
    s->erase(at, 1 + rng_.Below(std::min<size_t>(16, s->size() - at)));
  }

  // The head of `s` and the tail of another entry, at random cut points.
  void Splice(std::string* s) {
    const std::string& other = corpus_[rng_.Below(corpus_.size())];
    s->resize(rng_.Below(s->size() + 1));
    s->append(other.substr(rng_.Below(other.size() + 1)));
  }

  void OverwriteInteger(std::string* s) {
    static constexpr int kWidths[] = {1, 2, 4, 8};
    const size_t width = kWidths[rng_.Below(4)];
    if (s->size() < width) return;
    // Aligned offsets most of the time: header fields are.
    size_t at = rng_.Below(s->size() - width + 1);
    if (rng_.Below(4) != 0) at -= at % width;
    const std::vector<int64_t> values = InterestingIntegers(s->size());
    const int64_t value = values[rng_.Below(values.size())];
    std::memcpy(s->data() + at, &value, width);  // little-endian host
  }

  // A run of decimal digits (with its sign) replaced by an interesting value.
  void ReplaceNumberText(std::string* s) {
    std::vector<size_t> starts;
    for (size_t i = 0; i < s->size(); ++i) {
      const bool digit = (*s)[i] >= '0' && (*s)[i] <= '9';
      if (digit && (i == 0 || (*s)[i - 1] < '0' || (*s)[i - 1] > '9')) starts.push_back(i);
    }
    if (starts.empty()) return InsertBytes(s);
    size_t begin = starts[rng_.Below(starts.size())], end = begin;
    while (end < s->size() && (*s)[end] >= '0' && (*s)[end] <= '9') ++end;
    if (begin > 0 && (*s)[begin - 1] == '-') --begin;
    const std::vector<int64_t> values = InterestingIntegers(s->size());
    std::string text = absl::StrCat(values[rng_.Below(values.size())]);
    if (rng_.OneIn(8)) text = "18446744073709551616";  // 2^64: past every integer type
    s->replace(begin, end - begin, text);
  }

  // A copy of a slice inserted right after it, or at a random place.
  void DuplicateSlice(std::string* s) {
    const size_t begin = rng_.Below(s->size());
    const size_t length = 1 + rng_.Below(std::min<size_t>(256, s->size() - begin));
    const std::string slice = s->substr(begin, length);
    s->insert(rng_.OneIn(2) ? begin + length : rng_.Below(s->size() + 1), slice);
  }

  // A run of up to 1 MB of one letter after a quote, or anywhere.
  void GrowString(std::string* s) {
    size_t at = rng_.Below(s->size() + 1);
    const size_t quote = s->find('"', at);
    if (quote != std::string::npos && rng_.Below(4) != 0) at = quote + 1;
    s->insert(at, std::string(size_t{1} << (10 + rng_.Below(11)), 'k'));
  }

  // A field of `message` (at any depth) set to an interesting value, or a
  // repeated element duplicated, swapped or removed: mutations of a protobuf
  // that still parse.
  void MutateMessage(google::protobuf::Message* message) {
    using google::protobuf::FieldDescriptor;
    std::vector<std::pair<google::protobuf::Message*, const FieldDescriptor*>> fields;
    CollectFields(message, &fields);
    if (fields.empty()) return;
    auto [m, field] = fields[rng_.Below(fields.size())];
    const google::protobuf::Reflection* r = m->GetReflection();
    if (field->is_repeated()) {
      const int n = r->FieldSize(*m, field);
      if (n == 0) return;
      const int i = static_cast<int>(rng_.Below(n));
      switch (rng_.Below(4)) {
        case 0:
          r->SwapElements(m, field, i, static_cast<int>(rng_.Below(n)));
          return;
        case 1:
          r->SwapElements(m, field, i, n - 1);
          r->RemoveLast(m, field);
          return;
        case 2:
          if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
            r->AddMessage(m, field)->CopyFrom(r->GetRepeatedMessage(*m, field, i));
            return;
          }
          break;
        default:
          break;
      }
    }
    const std::vector<int64_t> values = InterestingIntegers(1000);
    const int64_t v = values[rng_.Below(values.size())];
    const int i = field->is_repeated() ? static_cast<int>(rng_.Below(r->FieldSize(*m, field))) : 0;
    switch (field->cpp_type()) {
#define TETRA_FUZZ_SET(CPPTYPE, Name, type)                    \
  case FieldDescriptor::CPPTYPE:                               \
    if (field->is_repeated()) {                                \
      r->SetRepeated##Name(m, field, i, static_cast<type>(v)); \
    } else {                                                   \
      r->Set##Name(m, field, static_cast<type>(v));            \
    }                                                          \
    break;
      TETRA_FUZZ_SET(CPPTYPE_INT32, Int32, int32_t)
      TETRA_FUZZ_SET(CPPTYPE_INT64, Int64, int64_t)
      TETRA_FUZZ_SET(CPPTYPE_UINT32, UInt32, uint32_t)
      TETRA_FUZZ_SET(CPPTYPE_UINT64, UInt64, uint64_t)
      TETRA_FUZZ_SET(CPPTYPE_DOUBLE, Double, double)
      TETRA_FUZZ_SET(CPPTYPE_FLOAT, Float, float)
      TETRA_FUZZ_SET(CPPTYPE_BOOL, Bool, bool)
#undef TETRA_FUZZ_SET
      case FieldDescriptor::CPPTYPE_STRING: {
        std::string text =
            field->is_repeated() ? r->GetRepeatedString(*m, field, i) : r->GetString(*m, field);
        MutateOnce(&text);
        if (field->is_repeated()) {
          r->SetRepeatedString(m, field, i, text);
        } else {
          r->SetString(m, field, text);
        }
        break;
      }
      case FieldDescriptor::CPPTYPE_ENUM:
        if (!field->is_repeated()) r->SetEnumValue(m, field, static_cast<int>(v));
        break;
      case FieldDescriptor::CPPTYPE_MESSAGE:
        if (!field->is_repeated()) r->ClearField(m, field);
        break;
    }
  }

 private:
  static void CollectFields(
      google::protobuf::Message* message,
      std::vector<std::pair<google::protobuf::Message*, const google::protobuf::FieldDescriptor*>>*
          out) {
    const google::protobuf::Reflection* r = message->GetReflection();
    std::vector<const google::protobuf::FieldDescriptor*> set;
    r->ListFields(*message, &set);
    for (const auto* field : set) {
      out->emplace_back(message, field);
      if (field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) continue;
      if (field->is_repeated()) {
        for (int i = 0; i < r->FieldSize(*message, field); ++i) {
          CollectFields(r->MutableRepeatedMessage(message, field, i), out);
        }
      } else {
        CollectFields(r->MutableMessage(message, field), out);
      }
    }
  }

  FuzzRng rng_;
  std::vector<std::string> corpus_;
};

// Every proper prefix of `input`: truncation at every length.
inline std::vector<std::string> Truncations(const std::string& input) {
  std::vector<std::string> out;
  for (size_t n = 0; n < input.size(); ++n) out.push_back(input.substr(0, n));
  return out;
}

// What is wrong with a parser's error, "" when nothing: it must have the
// UserError shape (one line, then one "hint: " line) and be short, so user
// text in it was quoted with UserText. The `paths` the parser was given may
// appear in it whole and do not count toward the length.
inline std::string UserErrorProblem(const absl::Status& status,
                                    const std::vector<std::string>& paths = {}) {
  constexpr size_t kMaxChars = 1200;
  std::string message(status.message());
  const std::string shown = message.substr(0, 300);
  const size_t hint = message.find("\nhint: ");
  if (hint == std::string::npos || hint == 0 || message.find('\n') != hint ||
      message.find('\n', hint + 1) != std::string::npos || message.size() == hint + 7) {
    return "not one line plus a hint line: " + shown;
  }
  std::string rest = message;
  for (const std::string& path : paths) {
    if (!path.empty()) rest = absl::StrReplaceAll(rest, {{path, ""}});
  }
  if (rest.size() > kMaxChars) {
    return absl::StrCat(rest.size(), " characters without the paths, more than ", kMaxChars, ": ",
                        shown);
  }
  return "";
}

// Replaces the file at `path` with `bytes` (gtest-free, for tools/fuzz/ too);
// false on failure. The old file is removed first: truncating it in place
// makes ext4 flush the new data to disk on close (its replace-via-truncate
// heuristic), which turns thousands of tiny inputs into seconds of disk waits.
inline bool WriteWholeFile(const std::string& path, const std::string& bytes) {
  std::error_code ignored;
  std::filesystem::remove(path, ignored);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return out.good();
}

// With TETRA_FUZZ_SEEDS_DIR set, writes `corpus` to <that>/<parser>/seed_<i>
// (the libFuzzer runs of tools/fuzz/ start from the tests' valid inputs).
inline void MaybeExportSeeds(const std::string& parser, const std::vector<std::string>& corpus) {
  const char* dir = std::getenv("TETRA_FUZZ_SEEDS_DIR");
  if (dir == nullptr) return;
  const std::string out = absl::StrCat(dir, "/", parser);
  std::filesystem::create_directories(out);
  for (size_t i = 0; i < corpus.size(); ++i) {
    WriteWholeFile(absl::StrCat(out, "/seed_", i), corpus[i]);
  }
}

// The inputs in tests/fuzz/corpus/<parser>/ (tiny files that once broke a
// parser), in name order.
inline std::vector<std::pair<std::string, std::string>> RegressionInputs(
    const std::string& source_dir, const std::string& parser) {
  std::vector<std::pair<std::string, std::string>> out;
  const std::filesystem::path dir =
      std::filesystem::path(source_dir) / "tests/fuzz/corpus" / parser;
  if (!std::filesystem::is_directory(dir)) return out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    out.emplace_back(entry.path().filename().string(),
                     std::string(std::istreambuf_iterator<char>(in), {}));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Caps this process's address space at its current size plus `headroom`
// bytes, so a parser that allocates what a hostile count asks for fails the
// test (std::bad_alloc, or a failed-allocation check) instead of taking the
// machine's memory. Not under AddressSanitizer, which reserves terabytes of
// address space for itself (its own allocation limit applies there).
inline void LimitAddressSpace(uint64_t headroom) {
#if !TETRA_TESTING_ASAN
  std::ifstream statm("/proc/self/statm");
  uint64_t pages = 0;
  statm >> pages;
  rlimit limit;
  getrlimit(RLIMIT_AS, &limit);
  limit.rlim_cur = std::min<uint64_t>(pages * sysconf(_SC_PAGESIZE) + headroom, limit.rlim_max);
  setrlimit(RLIMIT_AS, &limit);
#else
  (void)headroom;
#endif
}

}  // namespace tetra::testing

#endif  // TETRA_TESTS_TESTING_FUZZING_H_
