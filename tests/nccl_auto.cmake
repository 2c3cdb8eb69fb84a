# cmake -DSOURCE_DIR=<fsdp source> -DDIR=<scratch build folder> -DKokkos_DIR=<...> -P nccl_auto.cmake
# With a host-only Kokkos, FSDP_ENABLE_NCCL=AUTO configures fsdp without NCCL and says why, even
# where NCCL and the CUDA runtime are installed: a libfsdp that linked them would not load on a
# node without CUDA. (Configure only; the tests/CMakeLists.txt adds this test for such a Kokkos.)
file(REMOVE_RECURSE "${DIR}")
execute_process(
  COMMAND ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${DIR}" -DFSDP_ENABLE_NCCL=AUTO
          -DFSDP_BUILD_APPS=OFF -DFSDP_BUILD_TESTS=OFF "-DKokkos_DIR=${Kokkos_DIR}"
  RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT result EQUAL 0)
  message(FATAL_ERROR "configuring with FSDP_ENABLE_NCCL=AUTO failed (${result})")
endif()
if(NOT out MATCHES "NCCL backend OFF \\(AUTO, and Kokkos has no CUDA device")
  message(FATAL_ERROR "FSDP_ENABLE_NCCL=AUTO did not leave NCCL out of a host-only Kokkos build")
endif()
file(READ "${DIR}/include/fsdp/config.hpp" config)
if(config MATCHES "#define FSDP_HAVE_NCCL")
  message(FATAL_ERROR "config.hpp defines FSDP_HAVE_NCCL")
endif()
file(REMOVE_RECURSE "${DIR}")
message("all checks passed")
