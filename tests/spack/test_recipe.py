#!/usr/bin/env python3
"""Checks spack/packages/fsdp/package.py without spack, which this project's machines do not have.

A small stand-in for spack's package API records what the recipe declares (depends_on,
conflicts, license, ...) and runs cmake_args on stand-in specs. It checks what the recipe says,
not how spack concretizes it: the `when=` conditions are evaluated here by a small matcher that
knows +variant, ~variant and name=value, which is all the recipe's conditions use (the test fails
on any other form, so a new kind of condition cannot pass unchecked).

Usage: test_recipe.py [REPOSITORY_ROOT]   (default: two levels above this file)
"""
import importlib.util
import os
import re
import sys
import tempfile
import types

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(__file__), "..", ".."))
RECIPE = os.path.join(ROOT, "spack", "packages", "fsdp", "package.py")
CUDA_ARCHS = ("80", "90")

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)


# ---- the stand-in for spack ----------------------------------------------------------------
directives = []  # (name, args, kwargs) in the order the class body declares them


def directive(name):
    def record(*args, **kwargs):
        directives.append((name, args, kwargs))
    return record


def run_after(_phase):
    return lambda function: function


def join_path(*parts):
    return os.path.join(*parts)


class Prefix(str):
    """spack's Prefix: prefix.bin.mpiexec is <prefix>/bin/mpiexec."""

    def __getattr__(self, name):
        return Prefix(os.path.join(self, name))


class Executable:
    def __init__(self, path):
        self.path = path


path_programs = {}  # what the stand-in `which` finds on PATH, by name


def which(name):
    if os.path.isabs(name):
        return Executable(name) if os.path.exists(name) else None
    return Executable(path_programs[name]) if name in path_programs else None


class CMakePackage:
    """spack's define and define_from_variant, as CMakePackage formats them."""

    def __init__(self, spec, run_tests=False):
        self.spec = spec
        self.run_tests = run_tests

    @staticmethod
    def define(name, value):
        if isinstance(value, bool):
            return f"-D{name}:BOOL={'ON' if value else 'OFF'}"
        return f"-D{name}:STRING={value}"

    def define_from_variant(self, name, variant):
        return self.define(name, self.spec.variants[variant])


class CudaPackage:
    cuda_arch_values = CUDA_ARCHS


def install_modules(new_layout):
    """spack >= 1.0: build systems in spack_repo.builtin.build_systems; older: in spack.package."""
    for name in [m for m in sys.modules if m == "spack" or m.startswith(("spack.", "spack_repo"))]:
        del sys.modules[name]
    package = types.ModuleType("spack.package")
    for name in ("version", "variant", "depends_on", "conflicts", "requires", "license",
                 "maintainers", "patch", "provides"):
        setattr(package, name, directive(name))
    for function in (run_after, join_path, which):
        setattr(package, function.__name__, function)
    package.cache_extra_test_sources = lambda *args: None
    package.install_test_root = lambda pkg: "/test-root"
    package.__all__ = [n for n in vars(package) if not n.startswith("_")]
    spack = types.ModuleType("spack")
    spack.package = package
    sys.modules["spack"], sys.modules["spack.package"] = spack, package
    if new_layout:
        for name in ("spack_repo", "spack_repo.builtin", "spack_repo.builtin.build_systems"):
            sys.modules[name] = types.ModuleType(name)
        cmake = types.ModuleType("spack_repo.builtin.build_systems.cmake")
        cmake.CMakePackage = CMakePackage
        cuda = types.ModuleType("spack_repo.builtin.build_systems.cuda")
        cuda.CudaPackage = CudaPackage
        sys.modules[cmake.__name__], sys.modules[cuda.__name__] = cmake, cuda
    else:
        package.CMakePackage, package.CudaPackage = CMakePackage, CudaPackage
        package.__all__ += ["CMakePackage", "CudaPackage"]


def load_recipe(new_layout):
    directives.clear()
    install_modules(new_layout)
    spec = importlib.util.spec_from_file_location("fsdp_recipe", RECIPE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Fsdp, list(directives)


# ---- stand-in specs --------------------------------------------------------------------------
class Dependency:
    def __init__(self, name, prefix, package):
        self.name, self.prefix, self.package = name, Prefix(prefix), package


class Spec:
    def __init__(self, variants, dependencies):
        self.variants, self.dependencies = variants, dependencies

    def __getitem__(self, name):
        return self.dependencies[name]

    def satisfies(self, condition):
        for token in condition.split():
            for part in re.findall(r"[+~][^+~\s]+|[^+~\s]+", token):
                if part[0] in "+~":
                    wanted = part[0] == "+"
                    if self.variants.get(part[1:]) is not wanted:
                        return False
                elif "=" in part:
                    name, value = part.split("=", 1)
                    if str(self.variants.get(name)) != value:
                        return False
                else:
                    raise ValueError(f"the stand-in cannot evaluate '{part}' in '{condition}'")
        return True


class NewKokkos:
    """kokkos_cxx as a property of the package (spack-packages' kokkos)."""

    @property
    def kokkos_cxx(self):
        return "/kokkos-nvcc-wrapper/bin/nvcc_wrapper"


def make_spec(mpi_prefix, cuda=False, apps=True, nccl=False, mpi_package=None, new_kokkos=True):
    variants = {"cuda": cuda, "apps": apps, "nccl": nccl, "shared": True, "fortran": True,
                "cuda_arch": "90" if cuda else "none"}
    kokkos = Dependency("kokkos", "/kokkos", NewKokkos() if new_kokkos else object())
    if not new_kokkos:  # older kokkos recipes: set on the spec by setup_dependent_package
        kokkos.kokkos_cxx = "/old-kokkos-nvcc-wrapper/bin/nvcc_wrapper"
    mpi = Dependency("openmpi", mpi_prefix, mpi_package or object())
    return Spec(variants, {"kokkos": kokkos, "mpi": mpi})


def active(recorded, spec, kind="depends_on"):
    """The directives of one kind whose when= holds for spec: (first argument, keyword
    arguments)."""
    return [(args[0], kwargs) for name, args, kwargs in recorded
            if name == kind and spec.satisfies(kwargs.get("when", ""))]


def dependency(recorded, spec, name):
    """The active depends_on entries for package name (with or without a constraint)."""
    return [(s, kw) for s, kw in active(recorded, spec)
            if re.match(re.escape(name) + r"($|[@+~ ])", s)]


# ---- the checks ------------------------------------------------------------------------------
def check_recipe(new_layout, mpi_prefix):
    layout = "spack_repo layout" if new_layout else "spack.package layout"
    Fsdp, recorded = load_recipe(new_layout)

    host = make_spec(mpi_prefix)
    kokkos = [s for s, _ in dependency(recorded, host, "kokkos")]
    check("kokkos~cuda" in kokkos, f"{layout}: ~cuda does not ask for a host Kokkos: {kokkos}")
    check(not any("+cuda" in s for s in kokkos), f"{layout}: ~cuda asks for CUDA: {kokkos}")

    cuda = make_spec(mpi_prefix, cuda=True)
    kokkos = [s for s, _ in dependency(recorded, cuda, "kokkos")]
    check("kokkos+cuda+wrapper cuda_arch=90" in kokkos,
          f"{layout}: +cuda cuda_arch=90 does not ask for kokkos+cuda+wrapper cuda_arch=90: "
          f"{kokkos}")
    check("kokkos+cuda_lambda" in kokkos,
          f"{layout}: +cuda does not ask for +cuda_lambda: {kokkos}")
    check("kokkos~cuda" not in kokkos, f"{layout}: +cuda still asks for kokkos~cuda")

    for spec, label in ((host, "~cuda"), (cuda, "+cuda")):
        json = dependency(recorded, spec, "nlohmann-json")
        check(json and all(kw.get("type") == "build" for _, kw in json),
              f"{layout}: {label}: nlohmann-json is not build-only: {json}")
        cli11 = dependency(recorded, spec, "cli11")
        check(cli11 and all(kw.get("type") == "build" for _, kw in cli11),
              f"{layout}: {label} +apps: cli11 is not build-only: {cli11}")
    no_apps = make_spec(mpi_prefix, apps=False)
    check(not dependency(recorded, no_apps, "cli11"), f"{layout}: ~apps still depends on cli11")
    check(not dependency(recorded, no_apps, "kokkos-kernels"),
          f"{layout}: ~apps still depends on kokkos-kernels")

    nccl_conflicts = [w for s, kw in active(recorded, make_spec(mpi_prefix, nccl=True), "conflicts")
                      for w in [kw.get("when")] if s == "+nccl"]
    check(nccl_conflicts == ["~cuda"], f"{layout}: +nccl ~cuda is not a conflict: {nccl_conflicts}")

    # license() only with a license file to back it.
    licenses = [args for name, args, _ in recorded if name == "license"]
    has_license_file = any(n.upper().startswith(("LICENSE", "COPYING")) for n in os.listdir(ROOT))
    check(bool(licenses) == has_license_file,
          f"{layout}: license() {licenses} but license file in the repository: {has_license_file}")

    # cmake_args: nvcc_wrapper only for +cuda, a launcher only with the tests.
    args = Fsdp(host).cmake_args()
    check(not any("CMAKE_CXX_COMPILER" in a for a in args),
          f"{layout}: ~cuda sets the compiler: {args}")
    check(not any("MPIEXEC" in a for a in args), f"{layout}: no tests but a launcher: {args}")
    check("-DFSDP_BUILD_APPS:BOOL=ON" in args and "-DFSDP_ENABLE_NCCL:STRING=OFF" in args,
          f"{layout}: variants not passed: {args}")
    args = Fsdp(cuda).cmake_args()
    check("-DCMAKE_CXX_COMPILER:STRING=/kokkos-nvcc-wrapper/bin/nvcc_wrapper" in args,
          f"{layout}: +cuda does not compile with kokkos_cxx (package property): {args}")
    args = Fsdp(make_spec(mpi_prefix, cuda=True, new_kokkos=False)).cmake_args()
    check("-DCMAKE_CXX_COMPILER:STRING=/old-kokkos-nvcc-wrapper/bin/nvcc_wrapper" in args,
          f"{layout}: +cuda does not compile with kokkos_cxx (spec attribute): {args}")

    args = Fsdp(host, run_tests=True).cmake_args()
    expected = f"-DMPIEXEC_EXECUTABLE:STRING={os.path.join(mpi_prefix, 'bin', 'mpiexec')}"
    check(expected in args, f"{layout}: tests without the provider's mpiexec: {args}")
    check("-DFSDP_BUILD_TESTS:BOOL=ON" in args, f"{layout}: run_tests does not build the tests")

    class OneApiMpi:  # launcher outside <prefix>/bin, as intel-oneapi-mpi's mpiexec property says
        mpiexec = Prefix("/oneapi/mpi/2021.14/bin/mpiexec")
    args = Fsdp(make_spec(mpi_prefix, mpi_package=OneApiMpi()), run_tests=True).cmake_args()
    check("-DMPIEXEC_EXECUTABLE:STRING=/oneapi/mpi/2021.14/bin/mpiexec" in args,
          f"{layout}: the provider's mpiexec property is not used: {args}")


def main():
    with tempfile.TemporaryDirectory() as scratch:
        mpi_prefix = os.path.join(scratch, "openmpi")
        os.makedirs(os.path.join(mpi_prefix, "bin"))
        open(os.path.join(mpi_prefix, "bin", "mpiexec"), "w").close()
        for new_layout in (True, False):
            check_recipe(new_layout, mpi_prefix)

        # No mpiexec in the provider's bin: mpirun, then srun (Slurm-only Open MPI, cray-mpich).
        Fsdp, _ = load_recipe(True)
        bare = os.path.join(scratch, "bare")
        os.makedirs(os.path.join(bare, "bin"))
        open(os.path.join(bare, "bin", "mpirun"), "w").close()
        args = Fsdp(make_spec(bare), run_tests=True).cmake_args()
        check(f"-DMPIEXEC_EXECUTABLE:STRING={os.path.join(bare, 'bin', 'mpirun')}" in args,
              f"no mpiexec: mpirun not used: {args}")
        os.remove(os.path.join(bare, "bin", "mpirun"))
        path_programs["srun"] = "/usr/bin/srun"
        args = Fsdp(make_spec(bare), run_tests=True).cmake_args()
        check("-DMPIEXEC_EXECUTABLE:STRING=/usr/bin/srun" in args,
              f"no launcher: srun not used: {args}")
        path_programs.clear()
        args = Fsdp(make_spec(bare), run_tests=True).cmake_args()
        check(not any("MPIEXEC" in a for a in args), f"no launcher at all, yet one passed: {args}")

    for failure in failures:
        print("FAIL:", failure)
    print("spack recipe: all checks passed" if not failures else f"{len(failures)} checks failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
