# cmake -DTRAIN=<fsdp-train> -DWORK=<dir> -P progress_bar.cmake
# On a terminal (a pseudo-terminal from script(1)) fsdp-train draws a progress bar within each
# epoch; with stdout redirected to a file, or with --json, it draws none.
set(ARGS --samples 150000 --epochs 1 --batch-size 60)
file(MAKE_DIRECTORY ${WORK})
string(JOIN " " command ${TRAIN} ${ARGS})
execute_process(COMMAND script -qec "${command}" ${WORK}/terminal.log RESULT_VARIABLE result
                OUTPUT_QUIET TIMEOUT 120)
file(READ ${WORK}/terminal.log terminal)
if(NOT result EQUAL 0 OR NOT terminal MATCHES "epoch 1/1 \\[#*\\.*\\] [0-9]+/2000 steps, [0-9]+ steps/s, [0-9.]+ s left")
  message(FATAL_ERROR "no progress bar on a terminal (exit ${result}):\n${terminal}")
endif()
execute_process(COMMAND ${TRAIN} ${ARGS} RESULT_VARIABLE result OUTPUT_VARIABLE redirected
                TIMEOUT 120)
if(NOT result EQUAL 0 OR redirected MATCHES "steps/s")
  message(FATAL_ERROR "a progress bar in redirected output (exit ${result}):\n${redirected}")
endif()
execute_process(COMMAND script -qec "${command} --json" ${WORK}/json.log RESULT_VARIABLE result
                OUTPUT_QUIET TIMEOUT 120)
file(READ ${WORK}/json.log json)
if(NOT result EQUAL 0 OR json MATCHES "steps/s")
  message(FATAL_ERROR "a progress bar with --json (exit ${result}):\n${json}")
endif()
message("progress bar on a terminal only, not with --json")
