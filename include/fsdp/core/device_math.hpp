// Math functions callable inside Kokkos kernels on any backend. Kokkos 3.x has them in
// Kokkos::Experimental, Kokkos 4.x in Kokkos; std:: versions are host-only under CUDA.
#pragma once

#include <Kokkos_Core.hpp>

namespace fsdp::device_math {

#if KOKKOS_VERSION >= 40000
using Kokkos::exp;
using Kokkos::log;
using Kokkos::sqrt;
#else
using Kokkos::Experimental::exp;
using Kokkos::Experimental::log;
using Kokkos::Experimental::sqrt;
#endif

}  // namespace fsdp::device_math
