"""Which processes a session profiles over (the MPI launcher's word, a live
MPI, the choice of COMM_WORLD), and how tinyprof waits on MPI. Light on purpose: ``python -m tinyprof``
imports it before the script runs, without numpy or the flush."""
from __future__ import annotations

import importlib
import os
import sys
import time
from typing import Any, List, Optional, Tuple

from . import lifecycle

_SPIN = 5e-5                # seconds a wait spins before it sleeps
_NAP = (5e-5, 1e-3)         # first and longest sleep of a wait (s)

# Environment variables by which MPI launchers tell a process its rank and size.
_LAUNCH_VARS = (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                ("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE"))


def launched_rank() -> Optional[Tuple[int, int]]:
    """``(rank, size)`` when an MPI launcher started this process, else None."""
    for rank_var, size_var in _LAUNCH_VARS:
        rank, size = os.environ.get(rank_var, ""), os.environ.get(size_var, "")
        if rank.isdigit() and size.isdigit():
            return int(rank), int(size)
    return None


def live_mpi() -> Any:
    """The mpi4py.MPI module if MPI is initialised and not finalised, else None."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        return mpi
    return None


def world_comm(explicit: Any) -> Any:
    """The communicator a new session profiles over, or None for one process.

    ``explicit`` wins. Else COMM_WORLD when the application has MPI running,
    or when a launcher started this process as one of several ranks: then
    tinyprof initialises MPI itself through mpi4py (if installed), so that
    the profile holds every rank. A fork child never touches its parent's MPI.
    """
    if explicit is not None:
        return explicit
    if lifecycle.forked_child():
        return None
    if "mpi4py.MPI" not in sys.modules:
        launch = launched_rank()
        if launch is None or launch[1] < 2:
            return None
        try:
            with lifecycle.signals_blocked():       # the MPI library's threads take no signal
                importlib.import_module("mpi4py.MPI")   # initialises MPI
        except Exception:               # not installed, or no working MPI library
            return None
    mpi = live_mpi()
    return None if mpi is None else mpi.COMM_WORLD


def wait(requests: List[Any], timeout: Optional[float] = None) -> bool:
    """Complete the mpi4py ``requests`` without holding a core: when ranks
    outnumber cores, a rank in MPI's busy loop takes its share of a core from
    the ranks still at work (an aggregator above all). So a short spin, then
    tests with sleeps between, longer each time. False if ``timeout`` seconds
    passed first."""
    from mpi4py import MPI
    now = time.perf_counter()
    spin, end, nap = now + _SPIN, None if timeout is None else now + timeout, _NAP[0]
    while not MPI.Request.Testall(requests):
        now = time.perf_counter()
        if end is not None and now > end:
            return False
        if now > spin:
            time.sleep(nap)
            nap = min(2 * nap, _NAP[1])
    return True
