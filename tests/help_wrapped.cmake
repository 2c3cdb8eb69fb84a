# cmake -DPROGRAM=<path> -DNAME=<tool name> [-DSUBCOMMAND=<one of its subcommands>]
#       -P help_wrapped.cmake
# --help (and SUBCOMMAND --help) fits the reader's width (apps/common/terminal_width.hpp): the
# width $COLUMNS gives, a terminal's own width (a pseudo-terminal from script(1) given 70
# columns), and 80 columns where there is neither (output redirected to a file).
set(commands "--help")
if(DEFINED SUBCOMMAND)
  list(APPEND commands "${SUBCOMMAND} --help")
endif()
# check(<how> <columns> <output>): every line of output has at most <columns> characters.
function(check how columns out)
  if(NOT out MATCHES "Usage:")
    message(FATAL_ERROR "${how}: no usage in\n${out}")
  endif()
  # One list element a line (CMake's lists split at ';' and keep '[...]' whole).
  string(REGEX REPLACE "[];[]" "_" out "${out}")
  string(REPLACE "\n" ";" lines "${out}")
  foreach(line IN LISTS lines)
    string(LENGTH "${line}" length)
    if(length GREATER columns)
      message(FATAL_ERROR "${how}: a line of ${length} columns, more than ${columns}:\n${line}")
    endif()
  endforeach()
endfunction()
foreach(command IN LISTS commands)
  separate_arguments(args UNIX_COMMAND "${command}")
  execute_process(COMMAND ${CMAKE_COMMAND} -E env COLUMNS=60 ${PROGRAM} ${args}
                  RESULT_VARIABLE result OUTPUT_VARIABLE out TIMEOUT 60)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "COLUMNS=60 ${NAME} ${command} exited with ${result}")
  endif()
  check("COLUMNS=60 ${NAME} ${command}" 60 "${out}")
  execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=COLUMNS ${PROGRAM} ${args}
                  RESULT_VARIABLE result OUTPUT_VARIABLE out TIMEOUT 60)
  check("${NAME} ${command} > file" 80 "${out}")
  set(log "${CMAKE_CURRENT_BINARY_DIR}/${NAME}_help_terminal.log")
  execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=COLUMNS
                          script -qec "stty cols 70 rows 40 && ${PROGRAM} ${command}" "${log}"
                  RESULT_VARIABLE result OUTPUT_QUIET TIMEOUT 60)
  file(READ "${log}" out)
  string(REPLACE "\r" "" out "${out}")
  string(REGEX REPLACE "^Script started[^\n]*\n" "" out "${out}")
  string(REGEX REPLACE "\nScript done[^\n]*\n?$" "\n" out "${out}")
  check("${NAME} ${command} on a terminal of 70 columns" 70 "${out}")
endforeach()
message("${NAME}: help fits 60 columns, a terminal of 70, and 80 in a file")
