"""The settings of a profiling session: one frozen, validated object.

Everything configurable lives here: the ``Profiler(...)`` arguments, the
environment variables that change them, and the rules derived from them
(the aggregator count). Nothing here has side effects or mutable state.
"""
from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass
from typing import List, Optional, Tuple

from ..format.encoding import excerpt

Metrics = Tuple[Tuple[str, bool], ...]      # (key, consistent?) in declaration order

KEEP_POLICIES = ("last", "all")
TRACE_LIMIT = 2_000_000     # occurrences (and MPI calls) kept per rank: 64 MB each
CHAIN = 32                  # deltas after the first full snapshot (then twice as many each time)
MAX_SITE_DEPTH = 8          # frames of a call site (_frames.c's MAX_DEPTH)
MAX_SAMPLE = 10_000         # samples per second
SAMPLE_HZ = 100.0           # sample=True


def env_flag(name: str) -> bool:
    """Whether environment variable ``name`` is on (1, on, true, yes)."""
    return os.environ.get(name, "").strip().lower() in ("1", "on", "true", "yes")


def parse_selfkeys(selfkeys: str) -> List[Tuple[str, bool]]:
    """``"tag:0,mem:1"`` -> ``[("tag", True), ("mem", False)]``.

    As in the paper's Fig. 2, flag 0 marks a consistent metric (one value per
    callpath) and 1 an inconsistent one (a value per occurrence).
    """
    if not isinstance(selfkeys, str):
        raise TypeError(f"tinyprof: selfkeys must be a str such as 'tag:0,mem:1', "
                        f"not {type(selfkeys).__name__}")
    keys: List[Tuple[str, bool]] = []
    for item in filter(None, (s.strip() for s in selfkeys.split(","))):
        name, sep, flag = item.rpartition(":")
        if not sep or flag not in ("0", "1") or not name:
            raise ValueError(f"tinyprof: bad selfkeys item {excerpt(item)}: expected name:0 "
                             "(consistent) or name:1 (inconsistent)")
        if name == "time" or name in dict(keys):
            raise ValueError(f"tinyprof: metric {excerpt(name)} declared twice (or reserved)")
        keys.append((name, flag == "0"))
    return keys


def env_count(name: str) -> Optional[int]:
    """Environment variable ``name`` as an integer >= 1, or None if unset."""
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"tinyprof: {name} must be an integer >= 1, not {excerpt(text)}")
    return int(text)


def env_aggregators() -> Optional[int]:
    """``TINYPROF_AGGREGATORS``, if set (an integer >= 1)."""
    return env_count("TINYPROF_AGGREGATORS")


def clamp_aggregators(wanted: Optional[int], nranks: int) -> int:
    """``wanted`` aggregators (None: the default P // 16) clamped to [1, P]."""
    return min(max(1, wanted if wanted is not None else nranks // 16), nranks)


@dataclass(frozen=True)
class Settings:
    """What one session records and where it writes; see ``Profiler`` for the meaning.

    Build it with :meth:`create`, which validates every value; a Settings
    object is immutable, so every component of a session reads the same.
    """

    name: str = "profile"
    frequency: float = 0.0
    metrics: Metrics = ()
    outdir: str = "profile.tinyprof"
    aggregators: Optional[int] = None
    keep: str = "last"
    mpi: bool = False
    ucx: bool = False
    trace: bool = False
    trace_limit: int = TRACE_LIMIT
    chain: int = CHAIN
    sites: int = 0              # frames of an MPI call's site (0: no sites)
    sample: float = 0.0         # stack samples per second (0: none)

    @classmethod
    def create(cls, name: str = "profile", frequency: float = 0, selfkeys: str = "",
               outdir: Optional[str] = None, aggregators: Optional[int] = None,
               keep: str = "last", mpi: Optional[bool] = None, trace: Optional[bool] = None,
               trace_limit: Optional[int] = None, chain: Optional[int] = None,
               ucx: Optional[bool] = None, sites: object = False,
               sample: Optional[float] = None) -> Settings:
        if not isinstance(name, str):
            raise TypeError(f"tinyprof.Profiler: name must be a str, not {type(name).__name__}")
        # Checked as any object: callers may pass what the annotation rules out
        # (and typeshed's float is no numbers.Real).
        given: object = frequency
        if isinstance(given, bool) or not isinstance(given, numbers.Real):
            raise TypeError(f"tinyprof.Profiler: frequency must be a number of seconds, "
                            f"not {frequency!r}")
        freq = float(given)
        if not math.isfinite(freq) or freq < 0:
            raise ValueError(f"tinyprof.Profiler: frequency must be a finite number of "
                             f"seconds >= 0, not {frequency!r}")
        if aggregators is None:
            aggregators = env_aggregators()
        elif isinstance(aggregators, bool) or not isinstance(aggregators, int) or aggregators < 1:
            raise ValueError(f"tinyprof.Profiler: aggregators must be an integer >= 1, "
                             f"not {aggregators!r}")
        if keep not in KEEP_POLICIES:
            raise ValueError(f"tinyprof.Profiler: keep must be 'last' or 'all', not {keep!r}")
        if mpi is None:
            mpi = env_flag("TINYPROF_MPI")
        elif not isinstance(mpi, bool):
            raise TypeError(f"tinyprof.Profiler: mpi must be True or False, not {mpi!r}")
        if ucx is None:
            ucx = env_flag("TINYPROF_UCX")
        elif not isinstance(ucx, bool):
            raise TypeError(f"tinyprof.Profiler: ucx must be True or False, not {ucx!r}")
        mpi = mpi or ucx            # the transport view is part of MPI capture
        if trace is None:
            trace = env_flag("TINYPROF_TRACE")
        elif not isinstance(trace, bool):
            raise TypeError(f"tinyprof.Profiler: trace must be True or False, not {trace!r}")
        if trace_limit is None:
            trace_limit = env_count("TINYPROF_TRACE_LIMIT") or TRACE_LIMIT
        elif isinstance(trace_limit, bool) or not isinstance(trace_limit, int) or trace_limit < 1:
            raise ValueError(f"tinyprof.Profiler: trace_limit must be an integer >= 1, "
                             f"not {trace_limit!r}")
        if chain is None:
            chain = env_count("TINYPROF_CHAIN") or CHAIN
        elif isinstance(chain, bool) or not isinstance(chain, int) or chain < 1:
            raise ValueError(f"tinyprof.Profiler: chain must be an integer >= 1, not {chain!r}")
        if sites is True:
            sites = 1
        elif sites is False or sites is None:
            sites = 0
        elif not isinstance(sites, int) or not 0 <= sites <= MAX_SITE_DEPTH:
            raise ValueError(f"tinyprof.Profiler: sites must be True, False or a frame count "
                             f"in [0, {MAX_SITE_DEPTH}], not {sites!r}")
        hz: object = 0.0 if sample is None or sample is False else SAMPLE_HZ if sample is True else sample
        if isinstance(hz, bool) or not isinstance(hz, numbers.Real) or not math.isfinite(float(hz)) \
                or not 0 <= float(hz) <= MAX_SAMPLE:
            raise ValueError(f"tinyprof.Profiler: sample must be a number of samples per second "
                             f"in [0, {MAX_SAMPLE}], not {sample!r}")
        return cls(name=name, frequency=freq, metrics=tuple(parse_selfkeys(selfkeys)),
                   outdir=os.fspath(outdir) if outdir is not None else f"{name}.tinyprof",
                   aggregators=aggregators, keep=keep, mpi=mpi, ucx=ucx, trace=trace,
                   trace_limit=trace_limit, chain=chain, sites=sites, sample=float(hz))

    def aggregator_count(self, nranks: int) -> int:
        """Number of aggregators (files) of a flush over ``nranks`` ranks."""
        return clamp_aggregators(self.aggregators, nranks)

    @property
    def selfkeys(self) -> str:
        """The metrics in ``Profiler(selfkeys=...)`` spelling."""
        return ",".join(f"{k}:{0 if c else 1}" for k, c in self.metrics)


def group_of(rank: int, nranks: int, naggs: int) -> Tuple[int, int, int]:
    """``(index, first rank, size)`` of the group of ``rank`` when ``nranks``
    ranks form ``naggs`` contiguous groups whose sizes differ by at most one."""
    small, extra = divmod(nranks, naggs)        # the first `extra` groups hold one more
    edge = extra * (small + 1)
    index = rank // (small + 1) if rank < edge else extra + (rank - edge) // small
    return index, index * small + min(index, extra), small + (index < extra)
