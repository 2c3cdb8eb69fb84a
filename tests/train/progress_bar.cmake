# cmake -DTRAIN=<fsdp-train> -DMPIEXEC=<mpiexec> -DWORK=<dir> -P progress_bar.cmake
# On a terminal (a pseudo-terminal from script(1), given a size as a terminal has) fsdp-train
# draws a progress bar within each epoch, fitted to the terminal's width, also under mpiexec (whose
# ranks' pseudo-terminals take the terminal's size); with stdout redirected to a file, also under
# mpiexec (whose ranks then see a pseudo-terminal of no size), or with --json, none.
set(ARGS --samples 150000 --epochs 1 --batch-size 60)
file(MAKE_DIRECTORY ${WORK})
string(JOIN " " command stty cols 100 rows 40 "&&" ${TRAIN} ${ARGS})
execute_process(COMMAND script -qec "${command}" ${WORK}/terminal.log RESULT_VARIABLE result
                OUTPUT_QUIET TIMEOUT 120)
file(READ ${WORK}/terminal.log terminal)
if(NOT result EQUAL 0 OR NOT terminal MATCHES "epoch 1/1 \\[#*\\.*\\] [0-9]+/2000 steps, [0-9]+ steps/s, [0-9.]+ s left")
  message(FATAL_ERROR "no progress bar on a terminal (exit ${result}):\n${terminal}")
endif()
# On 60 columns every redraw fits in 59 (a line that wraps is not erased whole; the last column
# stays empty): the bar is narrower.
string(JOIN " " narrow stty cols 60 rows 40 "&&" ${TRAIN} ${ARGS})
execute_process(COMMAND script -qec "${narrow}" ${WORK}/narrow.log RESULT_VARIABLE result
                OUTPUT_QUIET TIMEOUT 120)
file(READ ${WORK}/narrow.log terminal)
string(REGEX MATCHALL "epoch 1/1 [^\r\n]*" draws "${terminal}")
if(NOT result EQUAL 0 OR NOT draws)
  message(FATAL_ERROR "no progress bar on a terminal of 60 columns (exit ${result}):\n${terminal}")
endif()
foreach(draw IN LISTS draws)
  string(LENGTH "${draw}" length)
  if(length GREATER 59)
    message(FATAL_ERROR "a progress bar of ${length} columns on a terminal of 60:\n${draw}")
  endif()
endforeach()
string(JOIN " " under_mpiexec_command stty cols 100 rows 40 "&&" ${MPIEXEC} -n 1 ${TRAIN} ${ARGS})
execute_process(COMMAND script -qec "${under_mpiexec_command}" ${WORK}/mpiexec.log
                RESULT_VARIABLE result OUTPUT_QUIET TIMEOUT 120)
file(READ ${WORK}/mpiexec.log terminal)
if(NOT result EQUAL 0 OR NOT terminal MATCHES "epoch 1/1 \\[#*\\.*\\] [0-9]+/2000 steps")
  message(FATAL_ERROR "no progress bar from mpiexec on a terminal (exit ${result}):\n${terminal}")
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
message("progress bar on a terminal only (fitted to its width, under mpiexec too), not with --json")
