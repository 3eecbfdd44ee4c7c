"""The MPI suite: ``mpiexec -n N python -m pytest --with-mpi tests/mpi``.

Without ``--with-mpi`` nothing here is collected, so a serial ``pytest tests``
never imports mpi4py (which would initialise MPI and make every flush of the
serial suite collective).
"""
from __future__ import annotations

import os
import shutil
import tempfile

import pytest


def pytest_ignore_collect(collection_path, config) -> bool:
    return not config.getoption("--with-mpi")


def pytest_configure(config) -> None:
    # One temporary root per run, a base directory per rank inside: concurrent
    # pytest processes would otherwise race on cleaning /tmp/pytest-of-*.
    if not config.getoption("--with-mpi") or config.option.basetemp:
        return
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    root = comm.bcast(tempfile.mkdtemp(prefix="tinyprof-mpi-") if comm.rank == 0 else None)
    config.option.basetemp = os.path.join(root, f"rank{comm.rank}")
    config._tinyprof_mpi_root = root


def pytest_unconfigure(config) -> None:
    root = getattr(config, "_tinyprof_mpi_root", None)
    if root is not None:
        from mpi4py import MPI
        MPI.COMM_WORLD.Barrier()
        if MPI.COMM_WORLD.rank == 0:
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def world():
    """MPI.COMM_WORLD, after a barrier: tests start together."""
    from mpi4py import MPI
    MPI.COMM_WORLD.Barrier()
    return MPI.COMM_WORLD
