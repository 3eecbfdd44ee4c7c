"""The MPI suite: ``mpiexec -n N python -m pytest --with-mpi tests/mpi``.

Without ``--with-mpi`` nothing here is collected, so a serial ``pytest tests``
never imports mpi4py (which would initialise MPI and make every flush of the
serial suite collective). A test failing on one rank of several prints its
report and ends the whole job (MPI_Abort) rather than let the others hang.
"""
from __future__ import annotations

import os
import shutil
import sys
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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failure on one rank of several ends the whole job: the other ranks
    would otherwise wait forever in a collective or a receive that the
    failed rank never reaches. Its report is written first, uncaptured,
    since the job ends before pytest's summary."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed or not item.config.getoption("--with-mpi"):
        return
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    if world.Get_size() == 1:
        return
    capture = item.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        sys.stdout.flush()
        sys.stderr.write(f"\n== rank {world.Get_rank()} of {world.Get_size()}: {report.nodeid} FAILED "
                         f"({report.when}); aborting the job (MPI_Abort)\n{report.longreprtext}\n")
        sys.stderr.flush()
    world.Abort(1)


@pytest.fixture
def world():
    """MPI.COMM_WORLD, after a barrier: tests start together."""
    from mpi4py import MPI
    MPI.COMM_WORLD.Barrier()
    return MPI.COMM_WORLD
