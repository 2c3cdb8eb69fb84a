# cmake -DPROGRAM=<path> -DNAME=<tool> -DARGS=<;-list> -P stdout_full.cmake
# A tool whose stdout is a full disk (/dev/full) exits 1 saying so; it must not exit 0 after
# losing its output.
execute_process(COMMAND ${PROGRAM} ${ARGS} RESULT_VARIABLE result OUTPUT_FILE /dev/full
                ERROR_VARIABLE err TIMEOUT 120)
message("${err}")
if(NOT result EQUAL 1)
  message(FATAL_ERROR "${NAME} with stdout on /dev/full exited with ${result}, expected 1")
endif()
if(NOT err MATCHES "${NAME}: cannot write the output to stdout")
  message(FATAL_ERROR "${NAME} did not say that it could not write its output")
endif()
message("a lost output is an error")
