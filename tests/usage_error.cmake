# cmake -DPROGRAM=<path> -DNAME=<tool name> [-DARGS=<bad command line, ;-list>]
#       [-DEXPECT=<regex the message matches>] [-DVERSION=<the project's version>]
#       -P usage_error.cmake
# A command line the tool cannot parse (ARGS, by default an unknown option) ends with exit code 2
# and a message after the tool's name; --help exits 0 and shows the tool's help alone; with
# VERSION, --version exits 0 and prints "<tool> <version>" then how fsdp was built.
if(NOT DEFINED ARGS)
  set(ARGS --no-such-option)
endif()
execute_process(COMMAND ${PROGRAM} ${ARGS} RESULT_VARIABLE result OUTPUT_VARIABLE out
                ERROR_VARIABLE err TIMEOUT 60)
message("${out}${err}")
if(NOT result EQUAL 2)
  message(FATAL_ERROR "${NAME} ${ARGS} exited with ${result}, expected 2")
endif()
if(NOT err MATCHES "^${NAME}: ")
  message(FATAL_ERROR "the usage error does not start with '${NAME}: '")
endif()
if(DEFINED EXPECT AND NOT err MATCHES "${EXPECT}")
  message(FATAL_ERROR "the usage error does not match '${EXPECT}'")
endif()
execute_process(COMMAND ${PROGRAM} --help RESULT_VARIABLE result OUTPUT_VARIABLE out TIMEOUT 60)
if(NOT result EQUAL 0 OR NOT out MATCHES "Usage:")
  message(FATAL_ERROR "${NAME} --help exited with ${result} or printed no usage")
endif()
# The tool's own help only: not Kokkos's banner of its options before it.
if(out MATCHES "Kokkos command line arguments")
  message(FATAL_ERROR "${NAME} --help printed Kokkos's banner")
endif()
if(DEFINED VERSION)
  execute_process(COMMAND ${PROGRAM} --version RESULT_VARIABLE result OUTPUT_VARIABLE out
                  TIMEOUT 60)
  string(REPLACE "." "\\." version_pattern "${VERSION}")
  if(NOT result EQUAL 0 OR NOT out MATCHES "^${NAME} ${version_pattern}\n"
     OR NOT out MATCHES "\nKokkos: " OR NOT out MATCHES "\nMPI: "
     OR NOT out MATCHES "\ntransport \\(MPI group\\): ")
    message(FATAL_ERROR "${NAME} --version exited with ${result} and printed:\n${out}")
  endif()
  message("${out}")
endif()
message("usage conventions hold")
