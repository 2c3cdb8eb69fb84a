# Run by CTest (cmake -P) with -DPROGRAM=<a tool that starts MPI>: on a machine without an
# InfiniBand or Omni-Path device, starting the tool does not load libpsm2 or libfabric, whose
# initialisation sleeps about 0.1 s in every process (apps/common/mpi_start.hpp). The loader
# names every library it maps under LD_DEBUG=files.
if(EXISTS /dev/infiniband OR EXISTS /dev/hfi1_0 OR EXISTS /dev/ipath0)
  message(STATUS "this machine has a fabric device: Open MPI may use its components")
  return()
endif()
# The user's own choice of components wins over the tools' rule: leave none set here.
unset(ENV{OMPI_MCA_pml})
unset(ENV{OMPI_MCA_btl})
unset(ENV{OMPI_MCA_mtl})
set(ENV{LD_DEBUG} files)
execute_process(COMMAND "${PROGRAM}" --version RESULT_VARIABLE status OUTPUT_VARIABLE out
                ERROR_VARIABLE loader)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${PROGRAM} --version exited ${status}:\n${out}")
endif()
string(REGEX MATCHALL "file=lib(psm2|fabric)[^ ]*" loaded "${loader}")
if(loaded)
  list(REMOVE_DUPLICATES loaded)
  message(FATAL_ERROR "${PROGRAM} loaded ${loaded} on a machine without a fabric device")
endif()
if(NOT loader MATCHES "file=libmpi")
  message(FATAL_ERROR "LD_DEBUG=files named no libmpi: this check cannot see what was loaded")
endif()
