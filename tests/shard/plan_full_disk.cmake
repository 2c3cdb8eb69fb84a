# cmake -DPROGRAM=<fsdp-plan> -DBASH=<bash> -DDIR=<scratch directory> -P plan_full_disk.cmake
# fsdp-plan --output on a full disk, made without mounting anything: bash's `ulimit -f 8` caps
# the files the program writes at 8 KiB (RLIMIT_FSIZE) and SIGXFSZ is ignored, so the write that
# passes the cap fails with EFBIG, as on a full disk. fsdp-plan must exit 1 saying so, leave the
# plan already there as it was and no temporary behind (it used to report the error and then
# crash in HDF5's exit handler, on a file HDF5 had failed to close).
file(REMOVE_RECURSE "${DIR}")
file(MAKE_DIRECTORY "${DIR}")
foreach(extension h5 json)
  set(plan "${DIR}/plan.${extension}")
  execute_process(COMMAND "${PROGRAM}" --preset gpt2 -n 2 --output "${plan}"
                  RESULT_VARIABLE result OUTPUT_QUIET ERROR_VARIABLE err TIMEOUT 120)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "writing the first plan failed (${result}): ${err}")
  endif()
  file(MD5 "${plan}" before)
  execute_process(
    COMMAND "${BASH}" -c "ulimit -f 8 && trap '' XFSZ && exec \"$0\" \"$@\""
            "${PROGRAM}" --preset gpt2 -n 4 --output "${plan}"
    RESULT_VARIABLE result OUTPUT_QUIET ERROR_VARIABLE err TIMEOUT 120)
  message("--output plan.${extension} on a full disk: exit ${result}: ${err}")
  if(NOT result EQUAL 1)
    message(FATAL_ERROR "fsdp-plan exited with ${result}, expected 1")
  endif()
  if(NOT err MATCHES "^fsdp-plan: cannot write plan file '[^']*plan[.]${extension}' .*File too large")
    message(FATAL_ERROR "fsdp-plan did not say that it could not write the plan")
  endif()
  file(MD5 "${plan}" after)
  if(NOT before STREQUAL after)
    message(FATAL_ERROR "the plan already there was changed")
  endif()
  file(GLOB left "${DIR}/*.tmp")
  if(left)
    message(FATAL_ERROR "temporaries left behind: ${left}")
  endif()
endforeach()
file(REMOVE_RECURSE "${DIR}")
message("a full disk is an error that leaves the old plan")
