# The main build makes the emulated GPU's build in build/emu/ (docs/gpus.md:
# "The emulated device"): the same sources configured with
# TETRA_EMULATED_GPU=ON, built on every `ninja -C build`, its binaries put
# beside tetra (build/tetra_emu, build/tetra_gpu_tests_emu) and its tests
# run by the main build's ctest. Needs no CUDA toolkit, only Boost.Context.
option(TETRA_EMULATED_GPU_BUILD "Build the emulated GPU (build/emu) with the main build" ON)
if(TETRA_EMULATED_GPU_BUILD AND NOT TETRA_SANITIZE AND NOT TETRA_FUZZERS)
  include(ExternalProject)
  ExternalProject_Add(tetra_emulated_gpu
    SOURCE_DIR ${PROJECT_SOURCE_DIR}
    BINARY_DIR ${PROJECT_BINARY_DIR}/emu
    CMAKE_GENERATOR ${CMAKE_GENERATOR}
    CMAKE_ARGS -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE} -DTETRA_EMULATED_GPU=ON
               -DTETRA_NATIVE=${TETRA_NATIVE} -DTETRA_EMU_OUTPUT_DIR=${PROJECT_BINARY_DIR}
    INSTALL_COMMAND ""
    BUILD_ALWAYS ON
    USES_TERMINAL_BUILD ON)
  set(TETRA_EMULATED_GPU_BINARY ${PROJECT_BINARY_DIR}/tetra_emu)
  # The main ctest runs build/emu's tests too.
  file(WRITE ${PROJECT_BINARY_DIR}/emulated_gpu_tests.cmake
       "if(EXISTS \"${PROJECT_BINARY_DIR}/emu/CTestTestfile.cmake\")\n"
       "  include(\"${PROJECT_BINARY_DIR}/emu/CTestTestfile.cmake\")\n"
       "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES
               ${PROJECT_BINARY_DIR}/emulated_gpu_tests.cmake)
endif()
