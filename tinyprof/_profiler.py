"""``Profiler``: the one-time, global settings of a run (paper Fig. 1 (3))."""
from __future__ import annotations

import os
from typing import Any, List, Optional, Tuple

from . import _eventmap


class Profiler:
    """Global profile settings; create it once, at start, on every rank.

    ``name`` names the profile and its files, ``frequency`` is the snapshot
    interval in seconds (0: none), ``selfkeys`` declares custom metrics as
    ``"tag:0,mem:1"`` (0 consistent: one value per callpath; 1 inconsistent: a
    value per occurrence). ``outdir`` defaults to ``<name>.tinyprof``;
    ``aggregators`` sets the file count of an MPI flush (else
    ``TINYPROF_AGGREGATORS``, else ``max(1, P // 16)``; clamped to [1, P]);
    ``comm`` is the mpi4py communicator to flush over, by default
    ``COMM_WORLD`` when MPI is in use. ``keep`` is the snapshot keep policy:
    ``"last"`` (the newest complete snapshot only) or ``"all"`` (a time series).

    Under MPI, create it after MPI is initialised: it is collective (one
    ``Dup`` of the communicator and, with ``frequency``, one broadcast of the
    snapshot clock's start time).
    """

    def __init__(self, name: str = "profile", frequency: float = 0, selfkeys: str = "", *,
                 outdir: Optional[str] = None, aggregators: Optional[int] = None,
                 comm: Any = None, keep: str = "last") -> None:
        if frequency < 0:
            raise ValueError(f"tinyprof.Profiler: frequency must be >= 0 seconds, not {frequency!r}")
        if aggregators is None:
            aggregators = _env_aggregators()
        elif isinstance(aggregators, bool) or not isinstance(aggregators, int) or aggregators < 1:
            raise ValueError(f"tinyprof.Profiler: aggregators must be an integer >= 1, "
                             f"not {aggregators!r}")
        if comm is not None and not hasattr(comm, "Allgather"):
            raise TypeError(f"tinyprof.Profiler: comm must be an mpi4py communicator, "
                            f"not {type(comm).__name__}")
        if keep not in ("last", "all"):
            raise ValueError(f"tinyprof.Profiler: keep must be 'last' or 'all', not {keep!r}")
        self.name = name
        self.frequency = float(frequency)
        self.metrics: List[Tuple[str, bool]] = _eventmap.parse_selfkeys(selfkeys)
        self.outdir = os.fspath(outdir) if outdir is not None else f"{name}.tinyprof"
        self.aggregators = aggregators
        self.comm = comm
        self.keep = keep
        self.flushed = False            # set by flush(): then no flush at exit
        _eventmap.configure(self.metrics)
        global _active
        _active = self
        from . import _snapshot         # it imports this module
        _snapshot.start(self)

    def __repr__(self) -> str:
        keys = ",".join(f"{k}:{0 if c else 1}" for k, c in self.metrics)
        return (f"tinyprof.Profiler({self.name!r}, frequency={self.frequency:g}, "
                f"selfkeys={keys!r}, outdir={self.outdir!r}, keep={self.keep!r})")


_active: Optional[Profiler] = None


def _env_aggregators() -> Optional[int]:
    text = os.environ.get("TINYPROF_AGGREGATORS", "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"tinyprof: TINYPROF_AGGREGATORS must be an integer >= 1, not {text!r}")
    return int(text)


def aggregator_count(prof: Profiler, nranks: int) -> int:
    """Number of aggregators (files) of a flush over ``nranks`` ranks."""
    return clamp_aggregators(prof.aggregators, nranks)


def clamp_aggregators(wanted: Optional[int], nranks: int) -> int:
    """``wanted`` aggregators (None: the default P // 16) clamped to [1, P]."""
    return min(max(1, wanted if wanted is not None else nranks // 16), nranks)


def active() -> Profiler:
    """The profiler of this process, created with defaults on first need."""
    return _active if _active is not None else Profiler()
