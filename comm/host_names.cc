#include "comm/host_names.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

#include "core/logging.h"

namespace tetra {

std::vector<std::string> HostNames(Communicator& world) {
  // The communicator moves numbers: 64 bytes travel as 16 int32s.
  constexpr int kBytes = 64, kWords = kBytes / 4;
  std::array<int32_t, kWords> mine{};
  const std::string host = HostName();
  std::memcpy(mine.data(), host.data(), std::min<size_t>(host.size(), kBytes - 1));
  std::vector<int32_t> all(static_cast<size_t>(kWords) * world.size());
  world.AllGather(Tensor::View(mine.data(), {kWords}, DType::kI32),
                  Tensor::View(all.data(), {kWords * world.size()}, DType::kI32));
  std::vector<std::string> names;
  for (int r = 0; r < world.size(); ++r) {
    const char* bytes = reinterpret_cast<const char*>(all.data() + r * kWords);
    names.emplace_back(bytes, strnlen(bytes, kBytes));
  }
  return names;
}

}  // namespace tetra
