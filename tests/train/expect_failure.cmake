# cmake -DCOMMAND=<;-list> -DEXPECT=<regex> [-DEXPECT_CODE=<n>] -P expect_failure.cmake
# Passes when COMMAND exits nonzero (EXPECT_CODE exactly, when given) and its output (stdout +
# stderr) matches EXPECT: a bad input must fail, and say why.
execute_process(COMMAND ${COMMAND} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err
                TIMEOUT 120)
message("${out}${err}")
if(result EQUAL 0)
  message(FATAL_ERROR "expected a failure, but the command succeeded")
endif()
if(DEFINED EXPECT_CODE AND NOT result EQUAL EXPECT_CODE)
  message(FATAL_ERROR "expected exit code ${EXPECT_CODE}, got ${result}")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "the output does not match: ${EXPECT}")
endif()
message("failed as expected (${result}) with the expected message")
