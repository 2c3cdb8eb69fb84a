# Run by CTest (cmake -P): installs the build tree into a fresh prefix, builds tests/install against
# it exactly as a user would, and runs the consumer under mpiexec.
foreach(var BUILD_DIR SOURCE_DIR MPIEXEC NUMPROC_FLAG)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "FsdpInstallTest.cmake needs -D${var}=...")
  endif()
endforeach()
set(prefix "${BUILD_DIR}/install-test/prefix")
set(consumer "${BUILD_DIR}/install-test/consumer")
file(REMOVE_RECURSE "${BUILD_DIR}/install-test")

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " command "${ARGN}")
    message(FATAL_ERROR "install test: '${command}' failed (${rc})")
  endif()
endfunction()

run(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}")
run(${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/install" -B "${consumer}"
    "-DCMAKE_PREFIX_PATH=${prefix}" "-DCMAKE_BUILD_TYPE=Release"
    # the Kokkos fsdp was built with, not whichever the consumer would find first
    "-DKokkos_DIR=${Kokkos_DIR}")
run(${CMAKE_COMMAND} --build "${consumer}")
# The Fortran consumer first: the test passes on the C++ consumer's line, printed last.
if(EXISTS "${consumer}/consumer_fortran")
  run(${MPIEXEC} ${NUMPROC_FLAG} 2 "${consumer}/consumer_fortran")
endif()
run(${MPIEXEC} ${NUMPROC_FLAG} 2 "${consumer}/consumer")
