# cmake -DFSDP_TRAIN=<path> -DFSDP_PLAN=<path> -DFSDP_SOLVE=<path> -DFSDP_BENCH=<path>
#       -DFSDP_CKPT=<path> -P bad_option_values.cmake       (a tool left out is skipped)
# Every tool, given an option value it refuses, exits 2 (a usage error, apps/common/usage_exit.hpp)
# with a message that starts with its name and names the option: one convention for all
# (docs/user-guide.md). Each case runs one process (fsdp-train without mpiexec, a singleton),
# and every failing case is listed before the script fails.
set(failures "")

# The arguments after expect are the command line; EMPTY stands for an empty argument (--dtype '',
# which a CMake list cannot hold), so the command runs through sh with every argument quoted.
macro(bad_value variable tool expect)
  if(DEFINED ${variable})
    set(line "'${${variable}}'")
    foreach(argument ${ARGN})
      if(argument STREQUAL "EMPTY")
        string(APPEND line " ''")
      else()
        string(APPEND line " '${argument}'")
      endif()
    endforeach()
    execute_process(COMMAND sh -c "${line}" RESULT_VARIABLE result OUTPUT_VARIABLE out
                    ERROR_VARIABLE err TIMEOUT 120)
    string(REPLACE ";" " " shown "${ARGN}")
    if(NOT result EQUAL 2)
      list(APPEND failures "${tool} ${shown}: exit code ${result}, expected 2\n${out}${err}")
    elseif(NOT err MATCHES "^${tool}: ")
      list(APPEND failures "${tool} ${shown}: the message does not start with '${tool}: '\n${err}")
    elseif(NOT err MATCHES "${expect}")
      list(APPEND failures "${tool} ${shown}: the message does not match '${expect}'\n${err}")
    else()
      message("${tool} ${shown}: exit 2, ${err}")
    endif()
  endif()
endmacro()

# fsdp-train: numbers that are not finite, an empty name, a pattern that matches nothing.
bad_value(FSDP_TRAIN fsdp-train "--lr: 'nan' is not a finite number" --lr nan)
bad_value(FSDP_TRAIN fsdp-train "--weight-decay: 'inf' is not a finite number" --weight-decay inf)
bad_value(FSDP_TRAIN fsdp-train "--check-tolerance: 'nan' is not a finite number" --check
          --check-tolerance nan)
bad_value(FSDP_TRAIN fsdp-train "--eval-fraction: 'nan' is not a finite number" --eval-fraction nan)
bad_value(FSDP_TRAIN fsdp-train "--dtype" --dtype EMPTY)
bad_value(FSDP_TRAIN fsdp-train
          "--eval-fraction 1e-09 holds out none of the 256 samples: give at least 0.0039"
          --eval-fraction 1e-9 --samples 256)
bad_value(FSDP_TRAIN fsdp-train "layer-wise pattern 'layers[.][*]' matches no layer.*layer0"
          --strategy hybrid --layer-wise "layers.*" --samples 64)
# fsdp-plan: names the library parses (they were runtime errors, exit 1).
bad_value(FSDP_PLAN fsdp-plan "--optimizer: .*'adamx'" --preset gpt2 -n 4 --optimizer adamx)
bad_value(FSDP_PLAN fsdp-plan "--precision: .*'half'" --preset gpt2 -n 4 --precision half)
bad_value(FSDP_PLAN fsdp-plan "--dtype: .*'fp7'" --preset gpt2 -n 4 --dtype fp7)
bad_value(FSDP_PLAN fsdp-plan "--dtype: unknown dtype ''" --preset gpt2 -n 4 --dtype EMPTY)
bad_value(FSDP_PLAN fsdp-plan "--strategy: .*'zero3'" --preset gpt2 -n 4 --strategy zero3)
bad_value(FSDP_PLAN fsdp-plan "layer-wise pattern 'layers[.][*]' matches no layer.*h[.]0"
          --preset gpt2 -n 4 --strategy hybrid --layer-wise "layers.*")
# fsdp-solve: a denormal FLOP rate (its reciprocal is infinite), a stack too large for memory.
bad_value(FSDP_SOLVE fsdp-solve "--flops: '1e-320' is not a finite number from 2.22507e-308"
          --generate mlp --flops 1e-320)
bad_value(FSDP_SOLVE fsdp-solve "--memory-bandwidth: 'nan'" --generate mlp --memory-bandwidth nan)
bad_value(FSDP_SOLVE fsdp-solve "--dtype: unknown dtype ''" --generate mlp --dtype EMPTY)
bad_value(FSDP_SOLVE fsdp-solve "--layers: Value 2147483647 not in range 1 to 1024" --generate
          stack --layers 2147483647)
# fsdp-bench: graph sizes of no node.
bad_value(FSDP_BENCH fsdp-bench "--nodes: Value 0 not in range 1 to" solver --nodes 0)
# fsdp-ckpt: a flag given a value it cannot take.
bad_value(FSDP_CKPT fsdp-ckpt "--json" inspect x.h5 --json=maybe)

if(failures)
  string(REPLACE ";" "\n\n" failures "${failures}")
  message(FATAL_ERROR "bad option values not refused as usage errors:\n\n${failures}")
endif()
message("every bad option value is a usage error (exit 2) naming the tool")
