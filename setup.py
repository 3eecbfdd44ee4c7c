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
  package still installs and MPI capture is unavailable: pip shows no build
  output, so why is recorded in ``libtinyprof_mpi.so.build-error`` beside
  where the library would be, and quoted wherever capture is missing.
- ``tinyprof/libtinyprof_whole.so``: the whole-program profile of an unchanged
  binary that has libtinyprof_mpi preloaded (the C++ header's implementation),
  built with the MPI C++ compiler (``$MPICXX``, else ``mpicxx`` beside this Python,
  else on PATH). Without it, preloading captures nothing in such a binary (it warns);
  its ``.build-error`` likewise.
"""
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

MPI_LIB = "tinyprof.libtinyprof_mpi"
WHOLE_LIB = "tinyprof.libtinyprof_whole"
MPI_SOURCES = [os.path.join("native", "src", f) for f in ("tinyprof_mpi.c", "got_patch.c", "tinyprof_ucx.c")]
MPI_FLAGS = ["-O2", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror"]
# Hidden and bound to itself: an annotated program's own copy of the
# implementation and this one never bind to each other.
# OMPI_SKIP_MPICXX: only MPI's C API is used, and Open MPI 4.1's C++ bindings fail -Werror.
WHOLE_FLAGS = ["-std=c++17", "-fvisibility=hidden", "-fvisibility-inlines-hidden", "-Wl,-Bsymbolic",
               "-pthread", "-DOMPI_SKIP_MPICXX"]
# _core.c and _frames.c are each one compilation unit that includes its parts
# (static functions stay inlinable across them): a change to a part rebuilds it.
CORE_PARTS = [os.path.join("tinyprof", "annotate", f) for f in
              ("node.c", "context.c", "steps.c", "event.c", "decorator.c", "cpython_internals.h")]
FRAMES_PARTS = [os.path.join("tinyprof", "runtime", f) for f in ("sites.c", "sampler.c", "cpython_frames.h")]
COMPILERS = {MPI_LIB: ("MPICC", "mpicc", "C"), WHOLE_LIB: ("MPICXX", "mpicxx", "C++")}
ERROR_SUFFIX = ".build-error"       # tinyprof/runtime/capture.py reads it


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
        os.makedirs(os.path.dirname(out), exist_ok=True)
        # A library left from an earlier build may be for another MPI, or stale: gone either way.
        for old in (out, out + ERROR_SUFFIX):
            if os.path.exists(old):
                os.remove(old)
        mpicc = find_mpicc(variable, name)
        if mpicc is None:
            return self.failed(out, f"{lib} not built: no MPI {language} compiler found at install "
                                    f"(${variable}, {name} beside Python or on PATH)")
        flags = MPI_FLAGS + (WHOLE_FLAGS if ext.name == WHOLE_LIB else [])
        cmd = [mpicc, *flags, "-I", os.path.join("native", "include"), *ext.sources, "-o", out]
        print(" ".join(cmd))
        try:
            result = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as e:
            return self.failed(out, f"{lib} not built: {mpicc} cannot run: {e}")
        if result.returncode != 0:
            self.failed(out, f"{lib} not built: {mpicc} failed at install:\n{result.stderr}")

    @staticmethod
    def failed(out, why):
        """Why ``out`` was not built: printed (pip shows it only with -v) and
        recorded beside it, for the messages of tinyprof where it is missing."""
        print(f"tinyprof: {why}", file=sys.stderr)
        with open(out + ERROR_SUFFIX, "w") as f:
            f.write(why)


setup(
    cmdclass={"build_ext": BuildExt},
    ext_modules=[
        Extension(
            "tinyprof.annotate._core",
            sources=["tinyprof/annotate/_core.c"],
            depends=CORE_PARTS,
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
            depends=FRAMES_PARTS,
            optional=True,
            extra_compile_args=["-O2"],
        ),
        Extension(MPI_LIB, sources=MPI_SOURCES, optional=True),
        Extension(WHOLE_LIB, sources=[os.path.join("native", "src", "tinyprof_whole.cpp")], optional=True),
    ],
)
