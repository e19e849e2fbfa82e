// CUDA's data-type enumeration (cuBLASLt's and NCCL-adjacent code's), with CUDA's values.
#ifndef TETRA_EMULATOR_INCLUDE_LIBRARY_TYPES_H_
#define TETRA_EMULATOR_INCLUDE_LIBRARY_TYPES_H_

enum cudaDataType_t {
  CUDA_R_32F = 0,
  CUDA_R_64F = 1,
  CUDA_R_16F = 2,
  CUDA_R_32I = 10,
  CUDA_R_16BF = 14,
};
using cudaDataType = cudaDataType_t;

#endif  // TETRA_EMULATOR_INCLUDE_LIBRARY_TYPES_H_
