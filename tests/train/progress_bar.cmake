# cmake -DTRAIN=<fsdp-train> -DMPIEXEC=<mpiexec> -DWORK=<dir> -P progress_bar.cmake
# On a terminal (a pseudo-terminal from script(1), given a size as a terminal has) fsdp-train
# draws a progress bar within each epoch; with stdout redirected to a file, under mpiexec (whose
# ranks see a pseudo-terminal of no size even when its output is a file), or with --json, none.
set(ARGS --samples 150000 --epochs 1 --batch-size 60)
file(MAKE_DIRECTORY ${WORK})
string(JOIN " " command stty cols 100 rows 40 "&&" ${TRAIN} ${ARGS})
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
execute_process(COMMAND ${MPIEXEC} -n 1 ${TRAIN} ${ARGS} RESULT_VARIABLE result
                OUTPUT_VARIABLE under_mpiexec TIMEOUT 120)
if(NOT result EQUAL 0 OR under_mpiexec MATCHES "steps/s")
  message(FATAL_ERROR "a progress bar in mpiexec's redirected output (exit ${result}):\n"
                      "${under_mpiexec}")
endif()
execute_process(COMMAND script -qec "${command} --json" ${WORK}/json.log RESULT_VARIABLE result
                OUTPUT_QUIET TIMEOUT 120)
file(READ ${WORK}/json.log json)
if(NOT result EQUAL 0 OR json MATCHES "steps/s")
  message(FATAL_ERROR "a progress bar with --json (exit ${result}):\n${json}")
endif()
message("progress bar on a terminal only, not with --json")
