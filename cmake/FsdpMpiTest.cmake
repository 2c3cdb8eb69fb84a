# fsdp_without_leak_check(<test...>)
# In the sanitizer build (FSDP_SANITIZE), runs the tests with frame-pointer unwinding and without
# LeakSanitizer; every address and undefined-behaviour check stays on. LeakSanitizer needs the
# full unwinder (scripts/test) for its Open MPI suppressions, and that unwinder walks DWARF for
# every allocation: MPI_Init alone then takes seconds per rank (a sanitized test_dtype on 1 rank
# 2.2 s against 0.6 s, test_sharding_modes on 2 ranks 5.3 s against 1.0 s). The leak check runs
# where leaks can be made: the tests of what owns MPI, HDF5 and C-API resources (comm,
# checkpoint, runtime, the bindings) at every rank count, every other test program at its first
# rank count, and the programs' runs of failing I/O.
function(fsdp_without_leak_check)
  if(FSDP_SANITIZE)
    set_tests_properties(${ARGN} PROPERTIES ENVIRONMENT_MODIFICATION
                         "ASAN_OPTIONS=string_append::fast_unwind_on_malloc=1:detect_leaks=0")
  endif()
endfunction()

# fsdp_add_mpi_test(NAME <name> SOURCES <src...> RANKS <n...> [LEAK_CHECK_RANKS <n...>]
#                   [LIBRARIES <lib...>] [TIMEOUT <s>] [ARGS <test program arguments...>]
#                   [ENVIRONMENT <VAR=value...>])
# Builds one Boost.Test executable and registers it once per rank count as <name>_np<N>, run as
#   ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} N ${MPIEXEC_PREFLAGS} exe ${MPIEXEC_POSTFLAGS}
# with PROCESSORS set so that `ctest -j` does not oversubscribe more than it must. In the
# sanitizer build LeakSanitizer runs at LEAK_CHECK_RANKS (by default the first of RANKS), the
# other rank counts without it (fsdp_without_leak_check).
function(fsdp_add_mpi_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;RANKS;LEAK_CHECK_RANKS;LIBRARIES;ENVIRONMENT;ARGS"
                        ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  if(NOT T_LEAK_CHECK_RANKS)
    list(GET T_RANKS 0 T_LEAK_CHECK_RANKS)
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
    if(NOT n IN_LIST T_LEAK_CHECK_RANKS)
      fsdp_without_leak_check(${T_NAME}_np${n})
    endif()
  endforeach()
endfunction()

# fsdp_isolate_mpi_sessions()
# Gives every test of the current directory an Open MPI session directory base of its own
# (OMPI_MCA_orte_tmpdir_base under the build tree); call it last, once the directory's tests exist.
# Open MPI 4.1 singletons (a program started without mpiexec, as most tool tests are) of one user
# on one node share one session directory, and each removes it recursively when it finishes, so
# two that start and end at once under ctest -j can fail in MPI_Init ("orte_session_dir failed";
# open-mpi/ompi#8510). A test's own processes start one after another, or under one mpiexec.
function(fsdp_isolate_mpi_sessions)
  get_directory_property(tests TESTS)
  foreach(test IN LISTS tests)
    set_property(TEST ${test} APPEND PROPERTY ENVIRONMENT_MODIFICATION
                 "OMPI_MCA_orte_tmpdir_base=set:${CMAKE_BINARY_DIR}/mpi-sessions/${test}")
  endforeach()
endfunction()
