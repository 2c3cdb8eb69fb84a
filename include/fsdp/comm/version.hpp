// The version of the fsdp library a program runs against, and what that library was built with:
// for every tool's --version, and for logs that must say which build produced a figure.
#pragma once

#include <string>

namespace fsdp {

// "0.1.0": the version of the library loaded at run time (a program compiled against another
// version's headers has that one in FSDP_VERSION_STRING).
const char* version();

// Lines "name: value" about this build and process: the version, Kokkos (version, execution
// and memory space of fsdp's buffers), NCCL (built in or not), the MPI library
// (MPI_Get_library_version's first line), and the transport an MPI group uses for fsdp's
// buffers (which depends on whether MPI is CUDA-aware, asked at run time). Needs no MPI_Init.
std::string build_description();

}  // namespace fsdp
