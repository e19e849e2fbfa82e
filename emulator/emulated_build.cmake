# The emulated GPU's binaries, included by CMakeLists.txt when
# TETRA_EMULATED_GPU is on (build/emu/, configured by emulator/subbuild.cmake):
# tetra as build/tetra_emu, the GPU tests as build/tetra_gpu_tests_emu, and
# the emulator's own tests. Its ctest tests are named emu.* and labelled emu.
set(TETRA_EMU_OUTPUT_DIR ${PROJECT_BINARY_DIR} CACHE PATH "Where tetra_emu and tetra_gpu_tests_emu go")
set_target_properties(tetra PROPERTIES OUTPUT_NAME tetra_emu
                      RUNTIME_OUTPUT_DIRECTORY ${TETRA_EMU_OUTPUT_DIR})

enable_testing()
include(GoogleTest)
# Every emulated test logs the kernels it launched; once all have run,
# emu.kernel_coverage fails naming any __global__ kernel none launched.
set(launch_log ${PROJECT_BINARY_DIR}/launched_kernels)
add_test(NAME emu.launch_log_reset
         COMMAND sh -c "rm -rf '${launch_log}' && mkdir -p '${launch_log}'")
set_tests_properties(emu.launch_log_reset PROPERTIES LABELS emu FIXTURES_SETUP emu_launches)
add_test(NAME emu.kernel_coverage
         COMMAND python3 ${PROJECT_SOURCE_DIR}/tests/emulator/check_kernel_coverage.py
                 ${PROJECT_SOURCE_DIR} ${launch_log})
set_tests_properties(emu.kernel_coverage PROPERTIES LABELS emu FIXTURES_CLEANUP emu_launches)
function(tetra_emulated_test name)
  target_compile_options(${name} PRIVATE -Og -Wno-unknown-pragmas)  # nvcc's #pragma unroll
  target_compile_definitions(${name} PRIVATE TETRA_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
                             TETRA_BINARY="$<TARGET_FILE:tetra>")
  add_dependencies(${name} tetra)
endfunction()

file(GLOB_RECURSE gpu_test_srcs CONFIGURE_DEPENDS tests/*_gpu_test.cc)
add_executable(tetra_gpu_tests ${gpu_test_srcs})
set_target_properties(tetra_gpu_tests PROPERTIES OUTPUT_NAME tetra_gpu_tests_emu
                      RUNTIME_OUTPUT_DIRECTORY ${TETRA_EMU_OUTPUT_DIR})
tetra_emulated_test(tetra_gpu_tests)
target_link_libraries(tetra_gpu_tests PRIVATE tetra_train GTest::gmock GTest::gtest GTest::gtest_main)
gtest_discover_tests(tetra_gpu_tests TEST_PREFIX "emu." DISCOVERY_TIMEOUT 60
                     PROPERTIES LABELS emu ENVIRONMENT TETRA_EMU_LAUNCH_LOG=${launch_log}
                                FIXTURES_REQUIRED emu_launches)

# The emulator's own tests: tests/emulator/<name>_test.cc, one binary each;
# <name>_mpi_test.cc under mpirun with 2, 4 and 8 ranks.
file(GLOB emulator_test_srcs CONFIGURE_DEPENDS tests/emulator/*_test.cc)
foreach(src ${emulator_test_srcs})
  get_filename_component(test_name ${src} NAME_WE)
  if(test_name MATCHES "_mpi_test$")
    add_executable(${test_name} ${src} tests/testing/mpi_test_main.cc)
    target_link_libraries(${test_name} PRIVATE tetra_comm GTest::gmock GTest::gtest)
    foreach(np 2 4 8)
      add_test(NAME emu.${test_name}.np${np}
               COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np ${np} $<TARGET_FILE:${test_name}>)
      set_tests_properties(emu.${test_name}.np${np} PROPERTIES LABELS emu TIMEOUT 300
          FIXTURES_REQUIRED emu_launches ENVIRONMENT
          "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;TETRA_EMU_LAUNCH_LOG=${launch_log}")
    endforeach()
  else()
    add_executable(${test_name} ${src})
    target_link_libraries(${test_name} PRIVATE tetra_kernels GTest::gmock GTest::gtest GTest::gtest_main)
    gtest_discover_tests(${test_name} TEST_PREFIX "emu." DISCOVERY_TIMEOUT 60
                         PROPERTIES LABELS emu ENVIRONMENT TETRA_EMU_LAUNCH_LOG=${launch_log}
                                    FIXTURES_REQUIRED emu_launches)
  endif()
  tetra_emulated_test(${test_name})
endforeach()

# The GPU script's every part on the emulated GPU: the shortened benchmarks,
# the gpu tests, the layout matrix through the staged backend and through
# NCCL against the CPU, checkpoints, commbench, the op profiles.
add_test(NAME emu.gpu_checks
         COMMAND ${PROJECT_SOURCE_DIR}/tools/gpu/run_gpu_checks.sh --emulated ${TETRA_EMU_OUTPUT_DIR})
set_tests_properties(emu.gpu_checks PROPERTIES LABELS emu TIMEOUT 1800
                     FIXTURES_REQUIRED emu_launches ENVIRONMENT TETRA_EMU_LAUNCH_LOG=${launch_log})
