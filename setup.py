"""Build the optional native parts of tinyprof.

- ``tinyprof.annotate._core``: the C core of the annotation hot path. If it cannot be
  compiled, tinyprof runs on its pure-Python fallback (tinyprof/annotate/__init__.py).
- ``tinyprof.format._parse``: the C parser of a profile's event lines. Without it,
  the reader's pure-Python reference parser reads the files (tinyprof/format/reader.py).
- ``tinyprof.runtime._frames``: reads Python's frames without the GIL, for the MPI
  call sites, and other threads' contexts, for the sampler. Without it, neither
  sites nor the sampler's event parents are available (they warn).
- ``tinyprof/libtinyprof_mpi.so``: the PMPI library of MPI capture, built
  with the environment's MPI C compiler (``$MPICC``, else ``mpicc`` beside
  this Python, else on PATH). Without one, or if it fails to compile, the
  package still installs and MPI capture is unavailable (it warns when asked for).
"""
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

MPI_LIB = "tinyprof.libtinyprof_mpi"
MPI_SOURCES = [os.path.join("native", "src", f) for f in ("tinyprof_mpi.c", "tinyprof_ucx.c")]
MPI_FLAGS = ["-O2", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror"]


def find_mpicc():
    """The MPI C compiler to use, or None."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpicc")
    for candidate in (os.environ.get("MPICC"), beside if os.access(beside, os.X_OK) else None,
                      shutil.which("mpicc")):
        if candidate:
            return candidate
    return None


class BuildExt(build_ext):
    """build_ext that builds the PMPI library with mpicc as a plain shared
    object (no Python ABI suffix), so ``--inplace`` and editable installs put
    it in tinyprof/ like the extension modules."""

    def get_ext_filename(self, fullname):
        # Called with the full dotted name and with its last part alone.
        if fullname in (MPI_LIB, MPI_LIB.rpartition(".")[2]):
            return os.path.join(*fullname.split(".")) + ".so"
        return super().get_ext_filename(fullname)

    def build_extension(self, ext):
        if ext.name != MPI_LIB:
            return super().build_extension(ext)
        out = self.get_ext_fullpath(ext.name)
        mpicc = find_mpicc()
        if mpicc is None:
            print("tinyprof: no MPI C compiler found ($MPICC, mpicc beside Python or on PATH): "
                  "libtinyprof_mpi.so not built, MPI capture unavailable", file=sys.stderr)
            return
        os.makedirs(os.path.dirname(out), exist_ok=True)
        cmd = [mpicc, *MPI_FLAGS, "-I", os.path.join("native", "include"), *ext.sources, "-o", out]
        print(" ".join(cmd))
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            print(f"tinyprof: building libtinyprof_mpi.so with {mpicc} failed, MPI capture "
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
    ],
)
