// CUDA's vector types as tetra uses them: dim3 and 16-byte uint4.
#ifndef TETRA_EMULATOR_INCLUDE_VECTOR_TYPES_H_
#define TETRA_EMULATOR_INCLUDE_VECTOR_TYPES_H_

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};

struct alignas(16) uint4 {
  unsigned x, y, z, w;
};

inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

#endif  // TETRA_EMULATOR_INCLUDE_VECTOR_TYPES_H_
