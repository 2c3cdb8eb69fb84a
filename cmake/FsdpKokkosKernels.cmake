# Kokkos Kernels for the models' matrix products (apps/models): Debian's Trilinos package exports
# the target trilinos_kokkoskernels, a standalone Kokkos Kernels 4.x Kokkos::kokkoskernels.
# Defines fsdp_kokkoskernels (an INTERFACE target naming whichever was found) and reports the
# BLAS that libblas.so resolves to, since that decides the GEMM rate: Debian's reference BLAS
# runs a 1024^2 fp32 product at about 2.5 GFLOP/s here, OpenBLAS (libopenblas0-pthread takes over
# libblas.so.3) at about 70 GFLOP/s on one core.
function(fsdp_find_kokkos_kernels)
  find_package(KokkosKernels REQUIRED)
  add_library(fsdp_kokkoskernels INTERFACE)
  if(TARGET Kokkos::kokkoskernels)
    target_link_libraries(fsdp_kokkoskernels INTERFACE Kokkos::kokkoskernels)
    set(_target Kokkos::kokkoskernels)
  elseif(TARGET trilinos_kokkoskernels)
    target_link_libraries(fsdp_kokkoskernels INTERFACE trilinos_kokkoskernels)
    set(_target trilinos_kokkoskernels)
  else()
    message(FATAL_ERROR "fsdp: find_package(KokkosKernels) defined neither Kokkos::kokkoskernels "
                        "nor trilinos_kokkoskernels")
  endif()
  # The BLAS the models' GEMMs reach on the host: the first linked library named *blas*, with
  # its symbolic links (Debian's alternatives) followed. A program loads the versioned name
  # (libblas.so.3), whose alternative is set apart from the unversioned one the link uses.
  get_target_property(_links ${_target} INTERFACE_LINK_LIBRARIES)
  set(_blas "none linked by ${_target}")
  foreach(_library IN LISTS _links)
    if(_library MATCHES "blas" AND EXISTS "${_library}")
      if(EXISTS "${_library}.3")
        set(_library "${_library}.3")
      endif()
      get_filename_component(_real "${_library}" REALPATH)
      set(_blas "${_library} -> ${_real}")
      break()
    endif()
  endforeach()
  message(STATUS "fsdp: models' GEMMs through Kokkos Kernels (${_target}), host BLAS ${_blas}")
  if(_blas MATCHES "/blas/libblas")
    message(WARNING "fsdp: libblas.so is the reference BLAS, about 30x slower than OpenBLAS on "
                    "matrix products; install an optimised one (Debian: libopenblas0-pthread)")
  endif()
endfunction()
