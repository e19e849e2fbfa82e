// Runtime options of the sanitizer build (CMake's TETRA_SANITIZE), compiled
// into every binary there: the sanitizers call these at start-up, so tests
// run under plain `ctest` behave as CI's do. The environment (ASAN_OPTIONS,
// UBSAN_OPTIONS, LSAN_OPTIONS) still overrides them.

// Every report ends the process with an error; an allocation a hostile file
// could ask for (anything over 8 GiB here) is a report, not a slow swap.
extern "C" const char* __asan_default_options() {
  return "detect_leaks=1:allocator_may_return_null=0:max_allocation_size_mb=8192";
}

extern "C" const char* __ubsan_default_options() { return "print_stacktrace=1:halt_on_error=1"; }

// Open MPI and the libraries under it keep their start-up allocations until
// exit on purpose; those are not tetra's leaks.
extern "C" const char* __lsan_default_suppressions() {
  return "leak:libmpi.so\n"
         "leak:libopen-pal.so\n"
         "leak:libopen-rte.so\n"
         "leak:libpmix.so\n"
         "leak:libhwloc.so\n"
         "leak:libevent\n"
         "leak:mca_\n";
}
