"""The one ``mpiexec`` of the serial tests that launch MPI jobs: the mpich
wheel's, beside this Python. A test that launches it requests the session
fixture ``mpiexec`` (or is decorated ``@needs_mpiexec``): tests/conftest.py
then marks it ``mpi``, and a missing mpiexec or mpi4py skips it, or fails it under CI=1."""
from __future__ import annotations

import importlib.util
import os

import pytest

from helpers.tools import BIN, require
from tinyprof.runtime import capture

MPIEXEC = str(BIN / "mpiexec")

needs_mpiexec = pytest.mark.usefixtures("mpiexec")


def require_mpiexec() -> str:
    """MPIEXEC, once mpi4py (which every launched Python rank imports) is there too."""
    if importlib.util.find_spec("mpi4py") is None:
        require(None, "mpi4py", "make install")
    return require(MPIEXEC, "mpiexec beside this Python", "make install")


# libtinyprof_mpi.so, MPI capture's library, is built by setup.py with mpicc: a build product, not a tool.
needs_capture_library = pytest.mark.skipif(not os.path.exists(capture.LIBRARY),
                                           reason="libtinyprof_mpi.so not built (make install)")
