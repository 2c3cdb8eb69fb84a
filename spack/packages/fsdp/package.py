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

    # No license(): the repository states none (no LICENSE file; README.md names no license and
    # docs/install.md says "The project has no license file yet"), and the recipe must not declare
    # one the project has not chosen. Add it with the license file.

    variant("nccl", default=False, description="Build the NCCL backend (needs +cuda)")
    variant("shared", default=True, description="Build a shared library")
    variant("apps", default=True, description="Build fsdp-bench and the other applications")
    variant("fortran", default=True, description="Build the Fortran module fsdp (use fsdp)")
    variant(
        "onednn",
        default=False,
        description="Multiply bf16 weights in bf16 in fsdp-train's and fsdp-bench's models "
        "(oneDNN's matmul: AMX, AVX-512 BF16)",
    )

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
    # ~cuda is a host build: the C++ compiler stays spack's own (cmake_args sets nvcc_wrapper only
    # for +cuda), and a CUDA Kokkos would put fsdp's Views and KOKKOS_LAMBDAs on the device, which
    # that compiler cannot build.
    depends_on("kokkos~cuda", when="~cuda")
    # fsdp's kernels are KOKKOS_LAMBDAs. spack's kokkos passes -DKokkos_ENABLE_CUDA_LAMBDA=OFF
    # unless +cuda_lambda, and Kokkos 3.x then compiles no device lambdas; Kokkos 4 turns them on
    # regardless in its later releases, and kokkos-kernels' recipe asks +cuda_lambda of Kokkos 4
    # too, so this covers the whole range above (the variant exists for kokkos@:4 +cuda; Kokkos 5
    # dropped it, so widening the range must revisit this line).
    depends_on("kokkos+cuda_lambda", when="+cuda")
    depends_on("hdf5@1.10.5:+mpi")
    # Both are header-only and used only while building: nlohmann-json inside libfsdp (private
    # include directories, in no installed header or CMake file), CLI11 by the applications alone
    # (CMakeLists.txt looks for it only with FSDP_BUILD_APPS).
    depends_on("nlohmann-json@3:", type="build")
    depends_on("cli11", type="build", when="+apps")
    # The applications' models: every matrix product a GEMM through Kokkos Kernels, over the
    # host BLAS or cuBLAS.
    depends_on("kokkos-kernels+blas", when="+apps")
    depends_on("kokkos-kernels+cublas", when="+apps+cuda")
    depends_on("blas", when="+apps")
    depends_on("onednn", when="+apps+onednn")
    depends_on("boost+test", type="test")
    depends_on("nccl", when="+nccl")

    # One CUDA architecture for the whole stack.
    for _arch in CudaPackage.cuda_arch_values:
        depends_on(f"kokkos+cuda+wrapper cuda_arch={_arch}", when=f"+cuda cuda_arch={_arch}")
        depends_on(f"nccl cuda_arch={_arch}", when=f"+nccl cuda_arch={_arch}")

    test_requires_compiler = True

    def _kokkos_cxx(self):
        """The C++ compiler Kokkos was built for: nvcc_wrapper for kokkos+cuda+wrapper."""
        kokkos = self.spec["kokkos"]
        # Newer kokkos recipes (spack-packages) have it as a property of the package, which
        # kokkos-kernels reads as self["kokkos"].kokkos_cxx; older ones set it on the spec in
        # setup_dependent_package.
        if hasattr(type(kokkos.package), "kokkos_cxx"):
            return kokkos.package.kokkos_cxx
        return kokkos.kokkos_cxx

    def _mpi_launcher(self):
        """The MPI provider's launcher, or None. As spack's CachedCMakeBuilder.get_mpi_exec does,
        the provider's own answer first, then what its bin holds."""
        mpi = self.spec["mpi"]
        # A provider whose launcher is not in <prefix>/bin says where it is (intel-oneapi-mpi: in
        # its component directory).
        if hasattr(mpi.package, "mpiexec"):
            return str(mpi.package.mpiexec)
        for name in ("mpiexec", "mpirun"):
            launcher = join_path(mpi.prefix.bin, name)
            if os.path.exists(launcher):
                return launcher
        # Open MPI built for Slurm without legacylaunchers, cray-mpich: no launcher of their own.
        srun = which("srun")
        return srun.path if srun else None

    def cmake_args(self):
        args = [
            self.define_from_variant("BUILD_SHARED_LIBS", "shared"),
            self.define_from_variant("FSDP_BUILD_APPS", "apps"),
            self.define_from_variant("FSDP_ENABLE_FORTRAN", "fortran"),
            self.define("FSDP_ENABLE_NCCL", "ON" if self.spec.satisfies("+nccl") else "OFF"),
            self.define("FSDP_ENABLE_ONEDNN", "ON" if self.spec.satisfies("+apps+onednn") else "OFF"),
            self.define("FSDP_BUILD_TESTS", self.run_tests),
        ]
        if self.spec.satisfies("+cuda"):
            # Kokkos+cuda compiles fsdp's own sources for the device too: they must go through the
            # compiler Kokkos was built with (nvcc_wrapper), as kokkos-kernels' recipe does.
            args.append(self.define("CMAKE_CXX_COMPILER", self._kokkos_cxx()))
        # Only the test suite launches MPI programs (FsdpMpiTest.cmake, tests/); without it CMake
        # has no use for a launcher, and FindMPI's own search is left alone.
        mpiexec = self._mpi_launcher() if self.run_tests else None
        if mpiexec:
            args.append(self.define("MPIEXEC_EXECUTABLE", mpiexec))
        return args

    @run_after("install")
    def cache_consumer_project(self):
        cache_extra_test_sources(self, [join_path("tests", "install")])

    def test_consumer(self):
        """build tests/install against the installed fsdp and run it on 2 ranks"""
        source = join_path(install_test_root(self), "tests", "install")
        build = "consumer-build"
        cmake = which(self.spec["cmake"].prefix.bin.cmake)
        args = [self.define("CMAKE_PREFIX_PATH", self.prefix)]
        if self.spec.satisfies("+cuda"):
            # The C++ consumer includes Kokkos: the same compiler as fsdp itself (cmake_args).
            args.append(self.define("CMAKE_CXX_COMPILER", self._kokkos_cxx()))
        cmake("-S", source, "-B", build, *args)
        cmake("--build", build)
        launcher = self._mpi_launcher()
        assert launcher, f"no launcher (mpiexec, mpirun, srun) for {self.spec['mpi'].name}"
        mpiexec = which(launcher)
        expected = {"consumer": "all_reduce over 2 ranks ok", "consumer_c": "c consumer: fsdp.h ok"}
        if self.spec.satisfies("+fortran"):
            expected["consumer_fortran"] = "fortran consumer: use fsdp ok"
        for program, line in expected.items():
            out = mpiexec("-n", "2", join_path(build, program), output=str.split, error=str.split)
            assert line in out, f"{program}: {out}"
