"""The aggregator sweep of paper Fig. 6: a synthetic profile and timed flushes.

Shared by ``tinyprof tune`` (``tune.py``) and ``benchmarks/flush.py``. Every
rank records the same synthetic workload, then flushes it once per aggregator
count A, ``repeats`` times each; a flush's time, and each of its parts', is
the maximum over ranks, and each figure the median over the repeats.
"""
from __future__ import annotations

import os
import statistics
import time
from typing import Dict, List, Sequence

from .format.output_dir import SUFFIX

# Kernels per group, and the number of variant events (ranks differ in which one they run).
LEAVES, VARIANTS = 9, 4
# Fields of runtime.mpi_flush.FlushStats that time the parts of the flush, in order.
PARTS = ("encode", "sync", "gather", "write")
# Columns of a sample: the flush's wall time, its parts, own CPU (maximum over
# ranks), then own CPU (mean over ranks).
COLUMNS = ("total", *PARTS, "own max", "own mean")


def shape(callpaths: int) -> List[int]:
    """Kernel counts of the synthetic profile of ``callpaths`` callpaths.

    Under ``main``, groups of up to ``LEAVES`` kernels hold the common
    callpaths; the last entry is the kernel count under the non-common
    ``variant<rank % 4>`` event (-1: no variant), which holds a tenth of the
    callpaths. 200 gives 18 full groups (181 common callpaths with ``main``)
    and a variant with 18 kernels (19 non-common).
    """
    if callpaths < 1:
        raise ValueError(f"callpaths must be >= 1, not {callpaths}")
    variant = (callpaths - 1) // 10
    left, groups = callpaths - 1 - variant, []
    while left > 0:
        groups.append(min(LEAVES, left - 1))
        left -= groups[-1] + 1
    return groups + [variant - 1]


def record(rank: int, callpaths: int, iterations: int) -> None:
    """Record the synthetic profile on this rank: ``callpaths`` callpaths (see
    :func:`shape`), each event ``loop=1`` with ``iterations`` values, timed by
    the real clock around empty bodies."""
    from . import Event

    *groups, variant = shape(callpaths)
    name = f"variant{rank % VARIANTS}"
    with Event("main"):
        for _ in range(iterations):
            for g, leaves in enumerate(groups):
                with Event(f"group{g}", loop=1):
                    for leaf in range(leaves):
                        with Event(f"kernel{leaf}", loop=1):
                            pass
            if variant >= 0:
                with Event(name, is_common=False, loop=1):
                    for leaf in range(variant):
                        with Event(f"kernel{leaf}", loop=1):
                            pass


def halvings(nranks: int) -> List[int]:
    """The aggregator counts of the sweep: P, P/2, ..., 1 (integer halving)."""
    counts = [nranks]
    while counts[-1] > 1:
        counts.append(counts[-1] // 2)
    return counts


class TimedComm:
    """Forwards to an mpi4py communicator, adding the CPU time spent inside its
    calls (and those of the communicators split from it) to ``spent[0]``: the
    flush's own CPU time is then its CPU time minus MPI's busy-waiting."""

    def __init__(self, comm, spent: List[float]) -> None:
        self._comm, self._spent = comm, spent

    def __getattr__(self, name: str):
        attr = getattr(self._comm, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            start = time.thread_time()
            try:
                out = attr(*args, **kwargs)
            finally:
                self._spent[0] += time.thread_time() - start
            return TimedComm(out, self._spent) if name == "Split" else out
        return call


def sweep(comm, outdir: str, counts: Sequence[int], repeats: int,
          name: str = "sweep") -> List[Dict]:
    """Flush what this rank recorded ``repeats`` times per aggregator count.

    Collective over ``comm``. Returns, on rank 0 only (``[]`` elsewhere), one
    dict per count: ``A`` (files written), ``bytes`` (their total size) and
    ``median``, the medians of :data:`COLUMNS` in seconds, and ``range``, the
    fastest and the slowest total over the repeats. The profile files
    stay in ``outdir`` (the last count's set).
    """
    import numpy as np
    from mpi4py import MPI

    from . import Profiler, flush
    from .runtime import session

    rank, size = comm.Get_rank(), comm.Get_size()
    spent = [0.0]
    timed = TimedComm(comm, spent)
    runs = []
    for naggs in counts:
        Profiler(name, outdir=outdir, aggregators=naggs, comm=timed)
        samples = []
        for _ in range(repeats):
            comm.Barrier()
            spent[0] = 0.0
            start, cpu = MPI.Wtime(), time.thread_time()
            flush()
            own = time.thread_time() - cpu - spent[0]
            stats = session.current().last_flush
            mine = np.array([MPI.Wtime() - start, *(getattr(stats, k) for k in PARTS), own])
            worst, total = np.zeros(len(mine)), np.zeros(len(mine))
            comm.Reduce(mine, worst, op=MPI.MAX, root=0)
            comm.Reduce(mine, total, op=MPI.SUM, root=0)
            samples.append([*worst.tolist(), total[-1] / size])
        if rank == 0:
            # the profile's files (a reused directory also holds the run marker)
            files = [f for f in os.listdir(outdir) if f.startswith(f"{name}.") and f.endswith(SUFFIX)]
            runs.append({"A": len(files),
                         "bytes": sum(os.path.getsize(os.path.join(outdir, f)) for f in files),
                         "median": [statistics.median(c) for c in zip(*samples)],
                         "range": [min(c[0] for c in samples), max(c[0] for c in samples)]})
    return runs
