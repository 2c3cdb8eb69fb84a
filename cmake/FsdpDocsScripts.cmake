# Run by CTest (cmake -P): every SLURM batch script must appear verbatim in docs/slurm.md, so the
# documentation cannot drift from the scripts.
file(GLOB scripts "${SOURCE_DIR}/slurm/*.sbatch")
file(READ "${SOURCE_DIR}/docs/slurm.md" doc)
foreach(script IN LISTS scripts)
  file(READ "${script}" text)
  string(FIND "${doc}" "${text}" position)
  if(position EQUAL -1)
    message(FATAL_ERROR "docs/slurm.md does not show ${script} as it is; paste the script there")
  endif()
endforeach()
