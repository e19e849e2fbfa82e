// CRC-32C (Castagnoli polynomial, reflected 0x82F63B78), the checksum of
// checkpoint shards and of TFRecord framing (TensorBoard event files), plus the
// "masked" form TFRecord stores.
#ifndef TETRA_CORE_CRC32C_H_
#define TETRA_CORE_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace tetra {

// The CRC-32C of `size` bytes at `data`, continuing from `crc` (the value of
// the bytes before them; 0 to start), so a large file can be summed in pieces.
uint32_t Crc32c(const void* data, size_t size, uint32_t crc = 0);

// TFRecord's masking: rotate right by 15 and add a constant, so a CRC stored
// next to the data it covers is not itself a valid CRC of that data.
uint32_t MaskCrc32c(uint32_t crc);

}  // namespace tetra

#endif  // TETRA_CORE_CRC32C_H_
