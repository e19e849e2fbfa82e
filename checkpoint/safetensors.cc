#include "checkpoint/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/atomic_file.h"
#include "core/json.h"
#include "core/status_macros.h"
#include "core/user_error.h"

namespace tetra {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian and is read in place");

constexpr size_t kLengthFieldBytes = 8;
// Hugging Face's reader refuses longer headers (safetensors' MAX_HEADER_SIZE);
// parsing one costs memory in proportion, many times its size.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr std::string_view kMetadataKey = "__metadata__";

// ---------------------------------------------------------------------------
// Header semantics.

// For a file whose header is not what a safetensors writer makes.
constexpr char kNotSafetensorsHint[] =
    "init_from must be a .safetensors file, e.g. model.safetensors from a Hugging Face "
    "checkpoint or `tetra export`";

absl::Status FileError(const std::string& path, const std::string& message,
                       const std::string& hint = kNotSafetensorsHint) {
  return UserError(absl::StrCat("safetensors file ", path, ": ", message), hint);
}

struct FormatDType {
  const char* name;
  std::optional<DType> dtype;  // nullopt: tetra does not read it
  int bits;                    // per element
};

// Every dtype the safetensors format defines (safetensors/src/tensor.rs).
constexpr FormatDType kFormatDTypes[] = {
    {"F32", DType::kF32, 32},     {"BF16", DType::kBF16, 16},   {"F16", DType::kF16, 16},
    {"I32", DType::kI32, 32},     {"F64", std::nullopt, 64},    {"I64", std::nullopt, 64},
    {"U64", std::nullopt, 64},    {"U32", std::nullopt, 32},    {"I16", std::nullopt, 16},
    {"U16", std::nullopt, 16},    {"I8", std::nullopt, 8},      {"U8", std::nullopt, 8},
    {"BOOL", std::nullopt, 8},    {"F8_E4M3", std::nullopt, 8}, {"F8_E5M2", std::nullopt, 8},
    {"F8_E8M0", std::nullopt, 8}, {"C64", std::nullopt, 64},    {"F6_E2M3", std::nullopt, 6},
    {"F6_E3M2", std::nullopt, 6}, {"F4", std::nullopt, 4},
};
absl::StatusOr<FormatDType> ParseDType(const std::string& name) {
  for (const FormatDType& d : kFormatDTypes) {
    if (d.name == name) return d;
  }
  std::vector<const char*> names;
  for (const FormatDType& d : kFormatDTypes) names.push_back(d.name);
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype ", UserText(name),
                                                 " (the format's dtypes are ",
                                                 absl::StrJoin(names, ", "), ")"));
}

absl::Status ParseMetadata(const JsonValue& value, std::map<std::string, std::string>* out) {
  if (value.kind != JsonValue::Kind::kObject) {
    return absl::InvalidArgumentError("\"__metadata__\" must be an object of strings");
  }
  for (size_t i = 0; i < value.keys.size(); ++i) {
    if (value.items[i].kind != JsonValue::Kind::kString) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"__metadata__\" entry ", UserText(value.keys[i]), " is ",
                       JsonKindName(value.items[i].kind), ", expected a string"));
    }
    (*out)[value.keys[i]] = value.items[i].string;
  }
  return absl::OkStatus();
}

struct TensorInfo {
  SafetensorsEntry entry;
  uint64_t begin;  // first byte in the data buffer
  uint64_t end;    // one past the last
};

// An error about one tensor of the header. Errors name the tensor but not
// the file.
absl::Status TensorError(const std::string& name, const std::string& problem) {
  return absl::InvalidArgumentError(absl::StrCat("tensor ", UserText(name), " ", problem));
}

// A tensor's description: exactly its three keys.
struct TensorFields {
  const JsonValue* dtype;
  const JsonValue* shape;
  const JsonValue* offsets;
};

absl::StatusOr<TensorFields> FindTensorFields(const std::string& name, const JsonValue& value) {
  if (value.kind != JsonValue::Kind::kObject) {
    return TensorError(name,
                       absl::StrCat("is described by ", JsonKindName(value.kind),
                                    ", expected an object with dtype, shape and data_offsets"));
  }
  for (const std::string& key : value.keys) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return TensorError(name, absl::StrCat("has unexpected key ", UserText(key),
                                            " (expected dtype, shape, data_offsets)"));
    }
  }
  const TensorFields fields{value.Find("dtype"), value.Find("shape"), value.Find("data_offsets")};
  if (value.keys.size() != 3 || fields.dtype == nullptr || fields.shape == nullptr ||
      fields.offsets == nullptr) {
    return TensorError(name, "needs exactly one each of dtype, shape and data_offsets");
  }
  return fields;
}

// Reads `shape` into `info`'s entry; returns the bytes it takes at `bits`
// per element.
absl::StatusOr<int64_t> ParseShape(const JsonValue& shape, int bits, TensorInfo* info) {
  const std::string& name = info->entry.name;
  if (shape.kind != JsonValue::Kind::kArray) {
    return TensorError(name, "has a shape that is not an array");
  }
  for (const JsonValue& dim : shape.items) {
    if (!dim.integer || *dim.integer < 0) {
      return TensorError(name, "has a shape entry that is not a non-negative integer");
    }
    info->entry.shape.push_back(*dim.integer);
  }
  const std::optional<int64_t> numel = CheckedNumElements(info->entry.shape);
  int64_t nbits;
  if (!numel || __builtin_mul_overflow(*numel, int64_t{bits}, &nbits)) {
    return TensorError(name, absl::StrFormat("has shape %s, too large to address",
                                             ShapeString(info->entry.shape)));
  }
  if (nbits % 8 != 0) {
    return TensorError(
        name, absl::StrFormat("has shape %s of %s, %d bits, which is not whole bytes",
                              ShapeString(info->entry.shape), info->entry.dtype_name, nbits));
  }
  return nbits / 8;
}

// Reads `offsets` into `info`: they must lie in the data buffer of
// `data_size` bytes and span the tensor's `nbytes`.
absl::Status ParseDataOffsets(const JsonValue& offsets, uint64_t data_size, int64_t nbytes,
                              TensorInfo* info) {
  const std::string& name = info->entry.name;
  if (offsets.kind != JsonValue::Kind::kArray || offsets.items.size() != 2 ||
      !offsets.items[0].integer || !offsets.items[1].integer) {
    return TensorError(name, "has data_offsets that are not two integers [begin, end]");
  }
  const int64_t begin = *offsets.items[0].integer, end = *offsets.items[1].integer;
  const std::string offsets_string = absl::StrFormat("[%d, %d]", begin, end);
  if (begin < 0 || end < begin || static_cast<uint64_t>(end) > data_size) {
    return TensorError(
        name, absl::StrFormat("has data_offsets %s outside the %d-byte data buffer (need 0 <= "
                              "begin <= end <= %d)",
                              offsets_string, data_size, data_size));
  }
  if (end - begin != nbytes) {
    return TensorError(name,
                       absl::StrFormat("has data_offsets %s spanning %d bytes, but shape "
                                       "%s of %s needs %d bytes",
                                       offsets_string, end - begin, ShapeString(info->entry.shape),
                                       info->entry.dtype_name, nbytes));
  }
  info->begin = static_cast<uint64_t>(begin);
  info->end = static_cast<uint64_t>(end);
  return absl::OkStatus();
}

// Validates one tensor's {"dtype", "shape", "data_offsets"} against a data
// buffer of `data_size` bytes.
absl::StatusOr<TensorInfo> ParseTensorInfo(const std::string& name, const JsonValue& value,
                                           uint64_t data_size) {
  ASSIGN_OR_RETURN(const TensorFields fields, FindTensorFields(name, value));
  const JsonValue& dtype = *fields.dtype;
  if (dtype.kind != JsonValue::Kind::kString) {
    return TensorError(name, "has a dtype that is not a string");
  }
  absl::StatusOr<FormatDType> parsed_dtype = ParseDType(dtype.string);
  if (!parsed_dtype.ok()) {
    return TensorError(name, absl::StrCat("has ", parsed_dtype.status().message()));
  }
  TensorInfo info{{name, parsed_dtype->dtype, dtype.string, {}}, 0, 0};
  ASSIGN_OR_RETURN(const int64_t nbytes, ParseShape(*fields.shape, parsed_dtype->bits, &info));
  RETURN_IF_ERROR(ParseDataOffsets(*fields.offsets, data_size, nbytes, &info));
  return info;
}

// The rule of Hugging Face's reader: the tensors, sorted by data_offsets,
// cover [0, data_size) exactly, each starting where the previous one ends.
// Errors name the tensors (or the bytes) that break it, but not the file.
absl::Status CheckTiling(const std::vector<TensorInfo>& tensors, uint64_t data_size) {
  std::vector<const TensorInfo*> order;
  for (const TensorInfo& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return std::pair(a->begin, a->end) < std::pair(b->begin, b->end);
  });
  auto label = [](const TensorInfo& t) {
    return absl::StrFormat("%s (data_offsets [%d, %d])", UserText(t.entry.name, 48), t.begin,
                           t.end);
  };
  uint64_t covered = 0;  // every byte before this belongs to exactly one tensor
  const TensorInfo* previous = nullptr;
  for (const TensorInfo* t : order) {
    if (t->begin < covered) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "tensors %s and %s overlap: the second begins at byte %d, before the first ends at "
          "byte %d, so they share bytes",
          label(*previous), label(*t), t->begin, covered));
    }
    if (t->begin > covered) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "bytes [%d, %d) of the data buffer belong to no tensor (a hole before %s)", covered,
          t->begin, label(*t)));
    }
    covered = t->end;
    previous = t;
  }
  if (covered != data_size) {
    return absl::InvalidArgumentError(
        previous == nullptr
            ? absl::StrFormat("the header lists no tensors but %d data bytes follow it", data_size)
            : absl::StrFormat("the data buffer has %d bytes after the last tensor, %s",
                              data_size - covered, label(*previous)));
  }
  return absl::OkStatus();
}

// The header's length from the file's first 8 bytes, checked against the
// file's `file_size` bytes and the format's limit.
absl::StatusOr<uint64_t> ReadHeaderSize(const std::string& path, const char* bytes,
                                        uint64_t file_size) {
  if (file_size < kLengthFieldBytes) {
    return FileError(path, absl::StrFormat("the file is %d bytes, shorter than the 8-byte header "
                                           "length that starts every safetensors file",
                                           file_size));
  }
  uint64_t header_size;
  std::memcpy(&header_size, bytes, kLengthFieldBytes);
  const uint64_t after_length = file_size - kLengthFieldBytes;
  if (header_size > after_length) {
    return FileError(path,
                     absl::StrFormat("the header length field says %d bytes of JSON but only "
                                     "%d bytes follow it (truncated or not safetensors?)",
                                     header_size, after_length),
                     absl::StrCat("a truncated file comes from an interrupted download or copy; ",
                                  kNotSafetensorsHint));
  }
  if (header_size > kMaxHeaderBytes) {
    return FileError(path, absl::StrFormat("the header length field says %d bytes of JSON, more "
                                           "than the format's limit of %d",
                                           header_size, kMaxHeaderBytes));
  }
  return header_size;
}

// The JSON header, which must be an object.
absl::StatusOr<JsonValue> ParseHeader(const std::string& path, std::string_view header) {
  size_t error_offset = 0;
  absl::StatusOr<JsonValue> parsed = ParseJson(header, &error_offset);
  if (!parsed.ok()) {
    return FileError(path, absl::StrFormat("malformed JSON header at byte %d of the header "
                                           "(file offset %d): %s",
                                           error_offset, error_offset + kLengthFieldBytes,
                                           parsed.status().message()));
  }
  if (parsed->kind != JsonValue::Kind::kObject) {
    return FileError(path, absl::StrCat("the header is ", JsonKindName(parsed->kind),
                                        ", expected a JSON object of tensors"));
  }
  return parsed;
}

// The tensors the header `root` describes, which must tile the data buffer
// of `data_size` bytes; its __metadata__ goes to `metadata`.
absl::StatusOr<std::vector<TensorInfo>> ParseTensors(const std::string& path, const JsonValue& root,
                                                     uint64_t data_size,
                                                     std::map<std::string, std::string>* metadata) {
  std::vector<TensorInfo> tensors;
  for (size_t i = 0; i < root.keys.size(); ++i) {
    const std::string& name = root.keys[i];
    if (name == kMetadataKey) {
      absl::Status status = ParseMetadata(root.items[i], metadata);
      if (!status.ok()) return FileError(path, std::string(status.message()));
      continue;
    }
    absl::StatusOr<TensorInfo> info = ParseTensorInfo(name, root.items[i], data_size);
    if (!info.ok()) return FileError(path, std::string(info.status().message()));
    tensors.push_back(*std::move(info));
  }
  if (absl::Status status = CheckTiling(tensors, data_size); !status.ok()) {
    return FileError(path, std::string(status.message()),
                     "Hugging Face's safetensors library refuses such a file too: re-save the "
                     "weights (safetensors.torch.save_file or `tetra export`)");
  }
  return tensors;
}

}  // namespace

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  ASSIGN_OR_RETURN(MappedFile mapping,
                   MappedFile::Open(path, "safetensors file",
                                    "check init_from: it must name an existing .safetensors file"));
  const uint64_t file_size = mapping.size();
  SafetensorsFile file(std::move(mapping));
  const char* bytes = reinterpret_cast<const char*>(file.mapping_.data());
  ASSIGN_OR_RETURN(const uint64_t header_size, ReadHeaderSize(path, bytes, file_size));
  const uint64_t data_size = file_size - kLengthFieldBytes - header_size;
  file.data_offset_ = static_cast<int64_t>(kLengthFieldBytes + header_size);
  ASSIGN_OR_RETURN(const JsonValue root,
                   ParseHeader(path, std::string_view(bytes + kLengthFieldBytes, header_size)));
  ASSIGN_OR_RETURN(std::vector<TensorInfo> tensors,
                   ParseTensors(path, root, data_size, &file.metadata_));
  for (TensorInfo& t : tensors) {
    // The JSON parser refuses duplicate keys, so every name is new here.
    file.index_.emplace(t.entry.name, file.entries_.size());
    file.begin_offsets_.push_back(t.begin);
    file.entries_.push_back(std::move(t.entry));
  }
  return file;
}

const SafetensorsEntry* SafetensorsFile::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

absl::Status SafetensorsFile::ReadF32(std::string_view name, float* out) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    return UserError(
        absl::StrFormat("safetensors file %s has no tensor named %s", path(), UserText(name)),
        "tetra reads Hugging Face names, e.g. model.layers.0.self_attn.q_proj.weight",
        absl::StatusCode::kNotFound);
  }
  const SafetensorsEntry& entry = entries_[it->second];
  const int64_t n = NumElements(entry.shape);
  const int64_t offset = data_offset_ + static_cast<int64_t>(begin_offsets_[it->second]);
  if (entry.dtype == DType::kF32) {
    return mapping_.ReadRange(
        offset, n * 4, [&](const uint8_t* src) { std::memcpy(out, src, n * sizeof(float)); });
  }
  if (entry.dtype == DType::kBF16 || entry.dtype == DType::kF16) {
    float (*convert)(uint16_t) = entry.dtype == DType::kBF16 ? Bf16ToFloat : Fp16ToFloat;
    return mapping_.ReadRange(offset, n * 2, [&](const uint8_t* src) {
      for (int64_t i = 0; i < n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, src + 2 * i, 2);  // the data buffer need not be aligned
        out[i] = convert(bits);
      }
    });
  }
  return UserError(
      absl::StrFormat("safetensors file %s: tensor %s is %s, but only F32, BF16 and F16 "
                      "convert to fp32",
                      path(), UserText(name), entry.dtype_name),
      "save the tensor as F32, BF16 or F16 (in PyTorch, .float() before "
      "safetensors.torch.save_file)");
}

// ---------------------------------------------------------------------------
// Writing.

namespace {

// The header JSON, padded with spaces to a multiple of 8 bytes so the data
// buffer starts 8-byte aligned.
absl::StatusOr<std::string> BuildHeader(const std::string& path,
                                        const std::vector<SafetensorsTensorRef>& tensors,
                                        DType dtype,
                                        const std::map<std::string, std::string>& metadata) {
  std::string header = "{";
  if (!metadata.empty()) {
    AppendJsonString(kMetadataKey, &header);
    header.append(":{");
    bool first = true;
    for (const auto& [key, value] : metadata) {
      if (!first) header.push_back(',');
      first = false;
      AppendJsonString(key, &header);
      header.push_back(':');
      AppendJsonString(value, &header);
    }
    header.push_back('}');
  }
  std::set<std::string_view> names;
  int64_t offset = 0;
  for (const SafetensorsTensorRef& t : tensors) {
    if (t.name == kMetadataKey || !names.insert(t.name).second) {
      return UserError(
          absl::StrCat("cannot write safetensors file ", path, ": tensor name \"", t.name,
                       t.name == kMetadataKey ? "\" is reserved" : "\" appears twice"),
          absl::StrCat("give every tensor its own name, other than \"", std::string(kMetadataKey),
                       "\""));
    }
    for (int64_t d : t.shape) {
      if (d < 0) {
        return UserError(absl::StrCat("cannot write safetensors file ", path, ": tensor \"", t.name,
                                      "\" has negative shape ", ShapeString(t.shape)),
                         "shapes list element counts, which are never negative");
      }
    }
    const int64_t nbytes = NumElements(t.shape) * static_cast<int64_t>(DTypeSize(dtype));
    if (header.size() > 1) header.push_back(',');
    AppendJsonString(t.name, &header);
    absl::StrAppend(&header, ":{\"dtype\":\"", DTypeName(dtype), "\",\"shape\":[",
                    absl::StrJoin(t.shape, ","), "],\"data_offsets\":[", offset, ",",
                    offset + nbytes, "]}");
    offset += nbytes;
  }
  header.push_back('}');
  header.resize((header.size() + 7) / 8 * 8, ' ');
  return header;
}

// The tensor's values in `dtype` (F32 as they are, BF16 rounded in chunks).
absl::Status WriteTensorData(AtomicFile& file, const SafetensorsTensorRef& t, DType dtype) {
  const int64_t n = NumElements(t.shape);
  TETRA_CHECK(n == 0 || t.data != nullptr) << "tensor " << t.name << " has no data";
  if (dtype == DType::kF32) return file.Append(t.data, n * sizeof(float));
  constexpr int64_t kChunk = 1 << 16;
  std::vector<uint16_t> bits(std::min(n, kChunk));
  for (int64_t start = 0; start < n; start += kChunk) {
    const int64_t count = std::min(kChunk, n - start);
    for (int64_t i = 0; i < count; ++i) bits[i] = FloatToBf16(t.data[start + i]);
    RETURN_IF_ERROR(file.Append(bits.data(), count * sizeof(uint16_t)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<SafetensorsTensorRef>& tensors, DType dtype,
                              const std::map<std::string, std::string>& metadata) {
  if (dtype != DType::kF32 && dtype != DType::kBF16) {
    return UserError(absl::StrCat("cannot write safetensors file ", path, " as ", DTypeName(dtype),
                                  ": tetra writes F32 or BF16"),
                     "export as F32, or as BF16 for half the size (tetra export --dtype bf16)");
  }
  ASSIGN_OR_RETURN(std::string header, BuildHeader(path, tensors, dtype, metadata));

  ASSIGN_OR_RETURN(
      AtomicFile file,
      AtomicFile::Create(path, absl::StrCat("check that the directory of ", path,
                                            " exists and is writable, with free space")));
  const uint64_t header_size = header.size();
  RETURN_IF_ERROR(file.Append(&header_size, kLengthFieldBytes));
  RETURN_IF_ERROR(file.Append(header));
  for (const SafetensorsTensorRef& tensor : tensors)
    RETURN_IF_ERROR(WriteTensorData(file, tensor, dtype));
  return file.Commit();
}

}  // namespace tetra
