# fsdp_add_mpi_test(NAME <name> SOURCES <src...> RANKS <n...> [LIBRARIES <lib...>] [TIMEOUT <s>]
#                   [ARGS <test program arguments...>] [ENVIRONMENT <VAR=value...>])
# Builds one Boost.Test executable and registers it once per rank count as <name>_np<N>, run as
#   ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} N ${MPIEXEC_PREFLAGS} exe ${MPIEXEC_POSTFLAGS}
# with PROCESSORS set so that `ctest -j` does not oversubscribe more than it must.
function(fsdp_add_mpi_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;RANKS;LIBRARIES;ENVIRONMENT;ARGS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE fsdp_test_main ${T_LIBRARIES})
  foreach(n IN LISTS T_RANKS)
    add_test(NAME ${T_NAME}_np${n}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${n} ${MPIEXEC_PREFLAGS}
                     $<TARGET_FILE:${T_NAME}> ${MPIEXEC_POSTFLAGS} ${T_ARGS})
    set_tests_properties(${T_NAME}_np${n} PROPERTIES
      PROCESSORS ${n} TIMEOUT ${T_TIMEOUT}
      ENVIRONMENT "${FSDP_TEST_ENVIRONMENT};${T_ENVIRONMENT}")
  endforeach()
endfunction()
