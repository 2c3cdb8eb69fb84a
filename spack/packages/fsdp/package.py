# Spack recipe for fsdp. Use it from a checkout of fsdp:
#   spack repo add <fsdp>/spack
#   spack install fsdp@main            # builds the branch of this checkout
#   spack install fsdp@main +cuda +nccl cuda_arch=90
#   spack test run fsdp                # builds tests/install (C++, C, Fortran) against it
import os

from spack.package import *

try:  # Spack >= 1.0 moved the build systems out of spack.package
    from spack_repo.builtin.build_systems.cmake import CMakePackage
    from spack_repo.builtin.build_systems.cuda import CudaPackage
except ImportError:
    pass

# fsdp has no public release yet: the recipe builds the repository it lives in.
_checkout = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


class Fsdp(CMakePackage, CudaPackage):
    """Fully sharded data parallel training (FSDP, ZeRO-3) for MPI-parallel HPC codes:
    sharded parameters, gradients and optimizer state over MPI (or NCCL), Kokkos Views,
    and sharded checkpoints in parallel HDF5."""

    homepage = "file://" + _checkout
    git = "file://" + _checkout

    version("main", branch="main")

    variant("nccl", default=False, description="Build the NCCL backend (needs +cuda)")
    variant("shared", default=True, description="Build a shared library")
    variant("apps", default=True, description="Build fsdp-bench and the other applications")
    variant("fortran", default=True, description="Build the Fortran module fsdp (use fsdp)")

    conflicts("+nccl", when="~cuda", msg="the NCCL backend needs +cuda")

    depends_on("c", type="build")
    depends_on("cxx", type="build")
    # Without it spack offers CMake no Fortran compiler, and the module is silently left out.
    depends_on("fortran", type="build", when="+fortran")
    depends_on("cmake@3.20:", type="build")

    depends_on("mpi")
    # Tested with Kokkos 3.4 (Debian) and 4.6; Kokkos 5 needs C++20, which fsdp does not build as.
    depends_on("kokkos@3.4:4")
    # a static Kokkos is built without -fPIC and cannot go into a shared libfsdp
    depends_on("kokkos+shared", when="+shared")
    depends_on("hdf5@1.10.5:+mpi")
    depends_on("nlohmann-json@3:")
    depends_on("cli11")
    # The applications' models: every matrix product a GEMM through Kokkos Kernels, over the
    # host BLAS or cuBLAS.
    depends_on("kokkos-kernels+blas", when="+apps")
    depends_on("kokkos-kernels+cublas", when="+apps+cuda")
    depends_on("blas", when="+apps")
    depends_on("boost+test", type="test")
    depends_on("nccl", when="+nccl")

    # One CUDA architecture for the whole stack.
    for _arch in CudaPackage.cuda_arch_values:
        depends_on(f"kokkos+cuda+wrapper cuda_arch={_arch}", when=f"+cuda cuda_arch={_arch}")
        depends_on(f"nccl cuda_arch={_arch}", when=f"+nccl cuda_arch={_arch}")

    test_requires_compiler = True

    def cmake_args(self):
        return [
            self.define_from_variant("BUILD_SHARED_LIBS", "shared"),
            self.define_from_variant("FSDP_BUILD_APPS", "apps"),
            self.define_from_variant("FSDP_ENABLE_FORTRAN", "fortran"),
            self.define("FSDP_ENABLE_NCCL", "ON" if self.spec.satisfies("+nccl") else "OFF"),
            self.define("FSDP_BUILD_TESTS", self.run_tests),
            self.define("MPIEXEC_EXECUTABLE", self.spec["mpi"].prefix.bin.mpiexec),
        ]

    @run_after("install")
    def cache_consumer_project(self):
        cache_extra_test_sources(self, [join_path("tests", "install")])

    def test_consumer(self):
        """build tests/install against the installed fsdp and run it on 2 ranks"""
        source = join_path(install_test_root(self), "tests", "install")
        build = "consumer-build"
        cmake = which(self.spec["cmake"].prefix.bin.cmake)
        cmake("-S", source, "-B", build, self.define("CMAKE_PREFIX_PATH", self.prefix))
        cmake("--build", build)
        mpiexec = which(self.spec["mpi"].prefix.bin.mpiexec)
        expected = {"consumer": "all_reduce over 2 ranks ok", "consumer_c": "c consumer: fsdp.h ok"}
        if self.spec.satisfies("+fortran"):
            expected["consumer_fortran"] = "fortran consumer: use fsdp ok"
        for program, line in expected.items():
            out = mpiexec("-n", "2", join_path(build, program), output=str.split, error=str.split)
            assert line in out, f"{program}: {out}"
