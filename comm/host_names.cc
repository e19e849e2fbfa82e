#include "comm/host_names.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

namespace tetra {

std::vector<std::string> HostNames(Communicator& world) {
  // The communicator moves numbers: 64 bytes travel as 16 int32s.
  constexpr int kBytes = 64, kWords = kBytes / 4;
  std::array<int32_t, kWords> mine{};
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') std::strcpy(host, "unknown");
  std::memcpy(mine.data(), host, std::min<size_t>(strlen(host), kBytes - 1));
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
