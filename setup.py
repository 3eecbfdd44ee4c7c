"""Build the optional native parts of tinyprof.

- ``tinyprof.annotate._core``: the C core of the annotation hot path. If it cannot be
  compiled, tinyprof runs on its pure-Python fallback (tinyprof/annotate/__init__.py).
- ``tinyprof.format._parse``: the C parser of a profile's event lines. Without it,
  the reader's pure-Python reference parser reads the files (tinyprof/format/reader.py).
- ``tinyprof.runtime._frames``: reads Python's frames without the GIL, for the MPI
  call sites, and every thread's stack and context, counted in C, for the sampler.
  Without it, sites are unavailable (they warn) and the sampler counts in Python,
  with every sample below the default parent.
- ``tinyprof/libtinyprof_mpi.so``: the PMPI library of MPI capture, built
  with the environment's MPI C compiler (``$MPICC``, else ``mpicc`` beside
  this Python, else on PATH). Without one, or if it fails to compile, the
  package still installs and MPI capture is unavailable (it warns when asked for).
- ``tinyprof/libtinyprof_whole.so``: the whole-program profile of an unchanged
  binary that has libtinyprof_mpi preloaded (the C++ header's implementation),
  built with the MPI C++ compiler (``$MPICXX``, else ``mpicxx`` beside this Python,
  else on PATH). Without it, preloading captures nothing in such a binary (it warns).
"""
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

MPI_LIB = "tinyprof.libtinyprof_mpi"
WHOLE_LIB = "tinyprof.libtinyprof_whole"
MPI_SOURCES = [os.path.join("native", "src", f) for f in ("tinyprof_mpi.c", "tinyprof_ucx.c")]
MPI_FLAGS = ["-O2", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror"]
# Hidden and bound to itself: an annotated program's own copy of the
# implementation and this one never bind to each other.
# OMPI_SKIP_MPICXX: only MPI's C API is used, and Open MPI 4.1's C++ bindings fail -Werror.
WHOLE_FLAGS = ["-std=c++17", "-fvisibility=hidden", "-fvisibility-inlines-hidden", "-Wl,-Bsymbolic",
               "-pthread", "-DOMPI_SKIP_MPICXX"]
COMPILERS = {MPI_LIB: ("MPICC", "mpicc", "C"), WHOLE_LIB: ("MPICXX", "mpicxx", "C++")}


def find_mpicc(variable="MPICC", name="mpicc"):
    """The MPI compiler to use (C by default), or None."""
    beside = os.path.join(os.path.dirname(sys.executable), name)
    for candidate in (os.environ.get(variable), beside if os.access(beside, os.X_OK) else None,
                      shutil.which(name)):
        if candidate:
            return candidate
    return None


class BuildExt(build_ext):
    """build_ext that builds the PMPI library with mpicc as a plain shared
    object (no Python ABI suffix), so ``--inplace`` and editable installs put
    it in tinyprof/ like the extension modules."""

    def get_ext_filename(self, fullname):
        # Called with the full dotted name and with its last part alone.
        if any(fullname in (lib, lib.rpartition(".")[2]) for lib in COMPILERS):
            return os.path.join(*fullname.split(".")) + ".so"
        return super().get_ext_filename(fullname)

    def build_extension(self, ext):
        if ext.name not in COMPILERS:
            return super().build_extension(ext)
        out = self.get_ext_fullpath(ext.name)
        variable, name, language = COMPILERS[ext.name]
        lib = os.path.basename(out)
        mpicc = find_mpicc(variable, name)
        if mpicc is None:
            print(f"tinyprof: no MPI {language} compiler found (${variable}, {name} beside Python or on "
                  f"PATH): {lib} not built, MPI capture unavailable", file=sys.stderr)
            return
        os.makedirs(os.path.dirname(out), exist_ok=True)
        flags = MPI_FLAGS + (WHOLE_FLAGS if ext.name == WHOLE_LIB else [])
        cmd = [mpicc, *flags, "-I", os.path.join("native", "include"), *ext.sources, "-o", out]
        print(" ".join(cmd))
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            print(f"tinyprof: building {lib} with {mpicc} failed, MPI capture "
                  f"unavailable:\n{result.stderr}", file=sys.stderr)


setup(
    cmdclass={"build_ext": BuildExt},
    ext_modules=[
        Extension(
            "tinyprof.annotate._core",
            sources=["tinyprof/annotate/_core.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        Extension(
            "tinyprof.format._parse",
            sources=["tinyprof/format/_parse.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        Extension(
            "tinyprof.runtime._frames",
            sources=["tinyprof/runtime/_frames.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        Extension(MPI_LIB, sources=MPI_SOURCES, optional=True),
        Extension(WHOLE_LIB, sources=[os.path.join("native", "src", "tinyprof_whole.cpp")], optional=True),
    ],
)
