# cmake -DMPIEXEC=<mpiexec> -DTRAIN=<fsdp-train> -DRECORDER=<region_recorder.so> -DDIR=<scratch>
#       -P regions.cmake
# fsdp-train's transformer on 2 ranks with a Kokkos Tools library loaded (our region recorder):
# every rank shows fsdp's phases as named regions, each pushed region popped.
file(REMOVE_RECURSE ${DIR})
file(MAKE_DIRECTORY ${DIR})
set(ENV{KOKKOS_PROFILE_LIBRARY} ${RECORDER})  # Kokkos 3
set(ENV{KOKKOS_TOOLS_LIBS} ${RECORDER})       # Kokkos 4
set(ENV{FSDP_REGION_LOG} ${DIR}/regions)
execute_process(
  COMMAND ${MPIEXEC} -n 2 ${TRAIN} --model gpt --layers 2 --hidden 16 --heads 2 --seq 16
          --text-bytes 4096 --batch-size 8 --epochs 1 --checkpoint-dir ${DIR}/checkpoints
  RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 240)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "fsdp-train exited with ${result}:\n${out}${err}")
endif()
file(GLOB logs ${DIR}/regions.*)
list(LENGTH logs ranks)
if(NOT ranks EQUAL 2)
  message(FATAL_ERROR "expected a region log from each of 2 ranks, found ${ranks}: ${logs}")
endif()
foreach(log IN LISTS logs)
  file(READ ${log} text)
  message("${log}:\n${text}")
  foreach(region "fsdp::forward h0" "fsdp::forward h1" "fsdp::backward h0" "fsdp::backward h1"
          "fsdp::wait_for_gather embed" "fsdp::reduce_gradients h1" "fsdp::finish_step"
          "fsdp::optimizer_step" "fsdp::save_checkpoint")
    if(NOT text MATCHES "(^|\n)${region}\t[1-9]")
      message(FATAL_ERROR "${log} has no region '${region}'")
    endif()
  endforeach()
  if(NOT text MATCHES "\nunbalanced 0\n" OR text MATCHES "pop without push")
    message(FATAL_ERROR "${log}: regions pushed and popped do not match")
  endif()
endforeach()
message("all checks passed")
