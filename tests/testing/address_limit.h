// A shell prefix that caps a child command's address space, for CLI tests
// that show a command refuses an absurd size without first allocating it: an
// allocation past the cap fails at once (a crash the test sees) instead of
// pushing a shared machine into swap. Empty under AddressSanitizer, whose
// shadow memory needs terabytes of address space.
#ifndef TETRA_TESTS_TESTING_ADDRESS_LIMIT_H_
#define TETRA_TESTS_TESTING_ADDRESS_LIMIT_H_

#include <cstdint>
#include <string>

namespace tetra::testing {

// "ulimit -v <gib GiB>; " for /bin/sh (std::system).
inline std::string AddressLimitPrefix(int64_t gib) {
#if defined(__SANITIZE_ADDRESS__)
  (void)gib;
  return "";
#else
  return "ulimit -v " + std::to_string(gib * 1024 * 1024) + "; ";
#endif
}

}  // namespace tetra::testing

#endif  // TETRA_TESTS_TESTING_ADDRESS_LIMIT_H_
