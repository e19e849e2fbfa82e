// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"):
// a counter-based generator, so any element's random draw is a pure function
// of (key, counter) and a shard can draw exactly its slice of a global tensor.
#ifndef TETRA_CORE_PHILOX_H_
#define TETRA_CORE_PHILOX_H_

#include <array>
#include <cstdint>
#include <string_view>

namespace tetra {

using PhiloxBlock = std::array<uint32_t, 4>;

PhiloxBlock Philox4x32(PhiloxBlock counter, std::array<uint32_t, 2> key);

// 64-bit FNV-1a: a stable hash of a parameter name (std::hash is not stable).
uint64_t StableHash(std::string_view text);

// Uniform in (0, 1) from 32 random bits (never 0, so log() is safe).
inline double UniformOpen(uint32_t bits) { return (bits + 0.5) * (1.0 / 4294967296.0); }

// Draws for one stream, e.g. a named parameter: element i of stream `stream`
// under `seed` is the same wherever and in whatever order it is drawn.
class CounterRng {
 public:
  CounterRng(uint64_t seed, uint64_t stream);
  // Standard normal for element `index` (Box-Muller on the first two words).
  double Normal(uint64_t index) const;
  // Uniform in (0, 1) for element `index`, `lane` 0..3 picking the word.
  double Uniform(uint64_t index, int lane = 0) const;
  PhiloxBlock Bits(uint64_t index) const;

 private:
  std::array<uint32_t, 2> key_;
  uint64_t stream_;
};

}  // namespace tetra

#endif  // TETRA_CORE_PHILOX_H_
