# Run by CTest (cmake -P): fails listing every C++ source that clang-format would change.
file(GLOB_RECURSE sources RELATIVE "${SOURCE_DIR}"
     "${SOURCE_DIR}/include/*.hpp" "${SOURCE_DIR}/include/*.h" "${SOURCE_DIR}/src/*.cpp"
     "${SOURCE_DIR}/src/*.hpp" "${SOURCE_DIR}/apps/*.cpp" "${SOURCE_DIR}/apps/*.hpp"
     "${SOURCE_DIR}/tests/*.cpp" "${SOURCE_DIR}/tests/*.hpp" "${SOURCE_DIR}/tests/*.c"
     "${SOURCE_DIR}/fuzz/*.cpp" "${SOURCE_DIR}/fuzz/*.hpp")
set(bad "")
foreach(source IN LISTS sources)
  execute_process(COMMAND "${CLANG_FORMAT}" --dry-run --Werror "${SOURCE_DIR}/${source}"
                  WORKING_DIRECTORY "${SOURCE_DIR}" RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(NOT rc EQUAL 0)
    list(APPEND bad "${source}")
  endif()
endforeach()
if(bad)
  string(REPLACE ";" "\n  " bad "${bad}")
  message(FATAL_ERROR "not clang-formatted (run clang-format -i on them):\n  ${bad}")
endif()
list(LENGTH sources count)
message(STATUS "clang-format: ${count} files clean")
