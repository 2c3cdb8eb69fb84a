# Run by CTest (cmake -P): fsdp used from outside, as a user would, against the installed tree.
#   STEP=install       installs the build tree into a scratch prefix, then moves the prefix (the
#                      package must not remember where it was installed), and checks the exported
#                      targets (no empty $<LINK_ONLY:>, no path of this machine's NCCL) and that
#                      README.md and docs/ are in share/doc/fsdp.
#   STEP=<project>     configures, builds and runs the consumer project tests/install/<project>
#                      (`.` is the C, C++ and Fortran one) on 2 ranks.
#   STEP=fortran_too_early  find_package(fsdp COMPONENTS Fortran) before enable_language(Fortran)
#                      must fail, and say why.
#   STEP=user_guide    builds the C++ blocks of docs/user-guide.md as one program against it.
#   STEP=pkgconfig     builds tests/install/pkgconfig with make, pkg-config and the MPI wrappers.
foreach(var STEP BUILD_DIR SOURCE_DIR MPIEXEC NUMPROC_FLAG SHARED)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "FsdpInstallTest.cmake needs -D${var}=...")
  endif()
endforeach()
set(root "${BUILD_DIR}/install-test")
set(prefix "${root}/prefix")

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " command "${ARGN}")
    message(FATAL_ERROR "install test: '${command}' failed (${rc})")
  endif()
endfunction()

# Runs a consumer on 2 ranks; its rank 0 prints `expected`.
function(run_consumer program expected)
  execute_process(COMMAND ${MPIEXEC} ${NUMPROC_FLAG} 2 ${program}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message("${out}")
  if(NOT rc EQUAL 0 OR NOT out MATCHES "${expected}")
    message(FATAL_ERROR "install test: ${program} on 2 ranks: exit ${rc}, expected '${expected}'")
  endif()
endfunction()

if(STEP STREQUAL "install")
  file(REMOVE_RECURSE "${root}")
  run(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${root}/staging")
  file(RENAME "${root}/staging" "${prefix}")
  file(GLOB_RECURSE exports "${prefix}/*Targets*.cmake")
  foreach(file IN LISTS exports)
    file(READ "${file}" text)
    if(text MATCHES "\\$<LINK_ONLY:>")
      message(FATAL_ERROR "install test: ${file} has an empty $<LINK_ONLY:> entry")
    endif()
    if(text MATCHES "nccl|CUDA::" AND SHARED)
      message(FATAL_ERROR "install test: ${file} names NCCL or CUDA, which a shared libfsdp keeps "
                          "private: a CPU-only consumer would need them")
    endif()
    string(FIND "${text}" "${root}" at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "install test: ${file} names the directory it was installed into")
    endif()
  endforeach()
  # The documentation is installed, every page of docs/, beside the README that links to them.
  file(GLOB pages RELATIVE "${SOURCE_DIR}" "${SOURCE_DIR}/docs/*.md")
  foreach(page IN LISTS pages ITEMS README.md)
    if(NOT EXISTS "${prefix}/share/doc/fsdp/${page}")
      message(FATAL_ERROR "install test: ${page} is not installed in share/doc/fsdp")
    endif()
  endforeach()
  if(EXISTS "${prefix}/bin/fsdp-plan")
    # an installed program finds libfsdp in the moved prefix
    run("${prefix}/bin/fsdp-plan" --preset gpt2 --world-size 2 --json OUTPUT_QUIET)
  endif()
  message("installed into ${prefix} (moved there after the install)")
elseif(STEP STREQUAL "fortran_too_early")
  execute_process(
    COMMAND ${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/install/fortran_too_early"
            -B "${root}/fortran_too_early" "-DCMAKE_PREFIX_PATH=${prefix}"
            "-DKokkos_DIR=${Kokkos_DIR}"
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message("${out}")
  string(REGEX REPLACE "[ \n]+" " " flat "${out}")
  string(CONCAT reason "component Fortran: the Fortran language is not enabled in this project; "
                "call enable_language\\(Fortran\\)")
  if(rc EQUAL 0 OR NOT flat MATCHES "${reason}")
    message(FATAL_ERROR "install test: find_package(fsdp COMPONENTS Fortran) without Fortran "
                        "enabled did not fail with the reason (exit ${rc})")
  endif()
  message("fortran_too_early: the reason is given")
elseif(STEP STREQUAL "user_guide")
  # The ```cpp blocks of docs/user-guide.md, in order, as one program: #include lines at the top,
  # the other lines in main(), each block marked with #line so errors name the guide's lines.
  file(STRINGS "${SOURCE_DIR}/docs/user-guide.md" lines)
  set(includes "#include \"reader_parts.hpp\"  // what the guide leaves to the reader\n")
  set(body "")
  set(in_block FALSE)
  set(number 0)
  set(blocks 0)
  foreach(line IN LISTS lines)
    math(EXPR number "${number} + 1")
    if(NOT in_block AND line STREQUAL "```cpp")
      set(in_block TRUE)
      math(EXPR blocks "${blocks} + 1")
      math(EXPR next "${number} + 1")
      string(APPEND body "#line ${next} \"docs/user-guide.md\"\n")
    elseif(in_block AND line STREQUAL "```")
      set(in_block FALSE)
    elseif(in_block AND line MATCHES "^#include")
      string(APPEND includes "#line ${number} \"docs/user-guide.md\"\n${line}\n")
      string(APPEND body "\n")  # keeps the #line numbering of the lines after it
    elseif(in_block)
      string(APPEND body "${line}\n")
    endif()
  endforeach()
  if(blocks EQUAL 0)
    message(FATAL_ERROR "install test: docs/user-guide.md has no ```cpp block")
  endif()
  set(build "${root}/user-guide")
  file(REMOVE_RECURSE "${build}")
  file(WRITE "${build}/user_guide.cpp"
       "// Written by the test docs_user_guide from docs/user-guide.md: edit the guide.\n"
       "${includes}\nint main(int argc, char** argv) {\n${body}  return 0;\n}\n")
  run(${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/install/user_guide" -B "${build}"
      "-DCMAKE_PREFIX_PATH=${prefix}" "-DCMAKE_BUILD_TYPE=Release" "-DKokkos_DIR=${Kokkos_DIR}"
      "-DUSER_GUIDE_SOURCE=${build}/user_guide.cpp")
  run(${CMAKE_COMMAND} --build "${build}")
  message("docs/user-guide.md: ${blocks} C++ blocks build against the installed fsdp")
elseif(STEP STREQUAL "pkgconfig")
  set(out_dir "${root}/pkgconfig")
  file(REMOVE_RECURSE "${out_dir}")
  file(MAKE_DIRECTORY "${out_dir}")
  file(GLOB pc_dir LIST_DIRECTORIES true "${prefix}/lib*/pkgconfig" "${prefix}/lib/*/pkgconfig")
  set(ENV{PKG_CONFIG_PATH} "${pc_dir}")
  if(SHARED)
    set(static OFF)
  else()
    set(static ON)
  endif()
  run(make -C "${SOURCE_DIR}/tests/install/pkgconfig" "OUT=${out_dir}" "FORTRAN=${FORTRAN}"
      "STATIC=${static}")
  run_consumer("${out_dir}/consumer" "consumer: all_reduce over 2 ranks ok")
  run_consumer("${out_dir}/consumer_c" "c consumer: fsdp.h ok")
  if(SHARED)
    # The README's line, exactly as printed, in a folder of its own: a.out must start as built.
    file(READ "${SOURCE_DIR}/README.md" readme)
    set(line "mpicxx app.cpp $(pkg-config --cflags --libs fsdp)")
    string(FIND "${readme}" "`${line}`" at)
    if(at LESS 0)
      message(FATAL_ERROR "install test: README.md no longer prints `${line}`: update this test")
    endif()
    file(MAKE_DIRECTORY "${out_dir}/readme")
    configure_file("${SOURCE_DIR}/tests/install/consumer.cpp" "${out_dir}/readme/app.cpp" COPYONLY)
    execute_process(COMMAND sh -c "${line}" WORKING_DIRECTORY "${out_dir}/readme" RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "install test: '${line}' failed (${rc})")
    endif()
    run_consumer("${out_dir}/readme/a.out" "consumer: all_reduce over 2 ranks ok")
  endif()
  if(FORTRAN)
    run_consumer("${out_dir}/consumer_fortran" "fortran consumer: use fsdp ok")
  endif()
else()
  # A consumer project: . (all three languages), cxx, c or fortran.
  if(STEP STREQUAL ".")
    set(build "${root}/consumer-mixed")
  else()
    set(build "${root}/consumer-${STEP}")
  endif()
  file(REMOVE_RECURSE "${build}")
  set(extra)
  if(SHARED)
    # A shared libfsdp keeps NCCL and CUDA to itself: a consumer configures without CUDA.
    list(APPEND extra "-DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON")
  endif()
  execute_process(
    COMMAND ${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/install/${STEP}" -B "${build}"
            "-DCMAKE_PREFIX_PATH=${prefix}" "-DCMAKE_BUILD_TYPE=Release" ${extra}
            # the Kokkos fsdp was built with, not whichever the consumer would find first
            "-DKokkos_DIR=${Kokkos_DIR}"
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message("${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install test: configuring the ${STEP} consumer failed (${rc})")
  endif()
  # A consumer that asked nothing of C++ gets no warning from Kokkos's configuration.
  if(out MATCHES "does not support CXX extensions")
    message(FATAL_ERROR "install test: find_package(fsdp) made Kokkos warn about CXX extensions")
  endif()
  run(${CMAKE_COMMAND} --build "${build}")
  set(ran FALSE)
  if(EXISTS "${build}/consumer_fortran")
    run_consumer("${build}/consumer_fortran" "fortran consumer: use fsdp ok")
    set(ran TRUE)
  endif()
  if(EXISTS "${build}/consumer_c")
    run_consumer("${build}/consumer_c" "c consumer: fsdp.h ok")
    set(ran TRUE)
  endif()
  if(EXISTS "${build}/consumer")
    run_consumer("${build}/consumer" "consumer: all_reduce over 2 ranks ok")
    set(ran TRUE)
  endif()
  if(EXISTS "${build}/consumer_solver")
    run_consumer("${build}/consumer_solver" "solver consumer: 7 nodes ok")
  endif()
  if(NOT ran)
    message(FATAL_ERROR "install test: tests/install/${STEP} built no consumer")
  endif()
endif()
