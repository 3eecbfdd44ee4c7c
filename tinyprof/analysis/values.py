"""Every value of a profile as flat numpy arrays, shared by the converters.

``Profile.series`` hands out Python lists per (callpath, rank); converting
thousands of ranks needs all values at once, so these functions read the
parsed files' flat arrays (``ParsedFile.events``) directly.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Union

import numpy as np

from ..errors import ConvertError, excerpt
from .pop import pop
from .profile import PER_SECOND, Profile, read
from .sums import MPI_VALUES as MPI_VALUES  # the converters import it from here
from .sums import inclusive, mpi_exclusive, parent_rows, segments

STATISTICS = ("sum", "mean", "min", "max")


def as_profile(profile_or_path: Union[Profile, str, os.PathLike[str]]) -> Profile:
    """A Profile as is; a path is read (FormatError on bad input)."""
    return profile_or_path if isinstance(profile_or_path, Profile) else read(profile_or_path)


def check_columns(profile: Profile, taken: Sequence[str], target: str) -> None:
    """ConvertError when a custom metric has the name of one of ``target``'s own columns."""
    clash = [k for k, _ in profile.metrics if k in taken]
    if clash:
        raise ConvertError(f"profile {excerpt(profile.name)}: metric {excerpt(clash[0])} has the name of a "
                           f"column of the {target} output")


def parents(profile: Profile) -> np.ndarray:
    """Index in ``profile.callpaths`` of each callpath's parent, -1 for a root."""
    return parent_rows(profile.callpaths)


def consistent(profile: Profile) -> Dict[str, np.ndarray]:
    """Each consistent metric's value per callpath, NaN where never given."""
    return {k: np.array([np.nan if v is None else v
                         for v in (profile.value(p, k) for p in profile.callpaths)])
            for k, c in profile.metrics if c}


@dataclass
class Occurrences:
    """One entry per recorded value, ordered by callpath, rank, execution, iteration."""

    callpath: np.ndarray               # int32 index into profile.callpaths
    rank: np.ndarray                   # int32
    execution: np.ndarray              # int32
    iteration: np.ndarray              # int32: occurrence index within its execution
    time_ns: np.ndarray                # int64, inclusive
    metrics: Dict[str, np.ndarray]     # inconsistent metric -> float64, NaN when missing


def occurrences(profile: Profile) -> Occurrences:
    """Every recorded value of ``profile`` with its callpath, rank, execution and iteration.

    Built from each file's flat arrays, in time and memory linear in the values
    recorded, whatever the executions the header declares."""
    keys = [k for k, c in profile.metrics if not c]
    index = {path: i for i, path in enumerate(profile.callpaths)}
    parts: List[List[np.ndarray]] = [[] for _ in range(5)]
    metrics: Dict[str, List[np.ndarray]] = {k: [] for k in keys}
    for f in profile.parsed:
        v = f.values
        rows = np.array([index[p] for p in f.paths], dtype=np.int64)
        slot_row = rows[np.repeat(np.arange(len(v.loops)), np.diff(v.line_slots))]
        local = np.searchsorted(f.exec_base, v.slots, side="right") - 1
        of_value = np.repeat(np.arange(len(v.slots)), v.counts)      # each value's slot
        first = np.cumsum(v.counts) - v.counts                      # each slot's first value
        for part, array in zip(parts, (slot_row[of_value], local[of_value] + f.header.first_rank,
                                       (v.slots - f.exec_base[local])[of_value],
                                       np.arange(len(of_value)) - first[of_value], v.times)):
            part.append(array)
        for k in keys:
            metrics[k].append(v.metrics[k])
    callpath, rank, execution, iteration = [np.concatenate(p).astype(np.int32) if p
                                            else np.zeros(0, np.int32) for p in parts[:4]]
    times = np.concatenate(parts[4]) if parts[4] else np.zeros(0, np.int64)
    # Files come in rank order and a file's values callpath after callpath:
    # a stable sort by callpath orders by callpath, rank, execution, iteration.
    order = np.argsort(callpath, kind="stable")
    return Occurrences(callpath[order], rank[order], execution[order], iteration[order], times[order],
                       {k: np.concatenate(v)[order] if v else np.zeros(0) for k, v in metrics.items()})


@dataclass
class Aggregates:
    """Per (callpath, rank) values, arrays of shape (len(callpaths), nranks).

    Times are in seconds. ``count`` is the number of recorded values; a
    statistic over none is 0 for a sum of times and NaN otherwise, and an
    inconsistent metric never given is NaN.
    """

    statistic: str
    count: np.ndarray                  # int64
    time_inc: np.ndarray               # float64
    time_exc: np.ndarray               # float64: time_inc minus the children's time_inc
    metrics: Dict[str, np.ndarray]     # every custom metric; consistent ones repeat per rank


def aggregate(profile: Profile, statistic: str = "sum") -> Aggregates:
    """Aggregate each (callpath, rank) over executions and iterations by ``statistic``."""
    if statistic not in STATISTICS:
        raise ValueError(f"unknown statistic {statistic!r}: use one of {', '.join(STATISTICS)}")
    shape = (len(profile.callpaths), profile.nranks)
    count = np.zeros(shape, dtype=np.int64)
    time_inc = np.full(shape, 0.0 if statistic == "sum" else np.nan)
    inconsistent = [k for k, c in profile.metrics if not c]
    metrics = {k: np.full(shape, np.nan) for k, _ in profile.metrics}
    scale = PER_SECOND[profile.unit]
    index = {path: i for i, path in enumerate(profile.callpaths)}
    for f in profile.parsed:
        row, rank, first, n = segments(f, index)
        count[row, rank] = n
        time_inc[row, rank] = _reduce(f.values.times, first, n, statistic)
        for k in inconsistent:
            metrics[k][row, rank] = _reduce_missing(f.values.metrics[k], first, statistic)
    for k, values in consistent(profile).items():
        metrics[k][:] = values[:, None]
    parent = parents(profile)
    children = np.zeros(shape)
    child = parent >= 0
    np.add.at(children, parent[child], np.nan_to_num(time_inc[child]))
    # In ns until here: integral sums subtract exactly before the one division.
    return Aggregates(statistic, count, time_inc / scale, (time_inc - children) / scale, metrics)


def _reduce(values: np.ndarray, starts: np.ndarray, counts: np.ndarray, statistic: str) -> np.ndarray:
    """``statistic`` of each non-empty segment ``values[start:start+count]``.

    The segments are contiguous and in order, as the ranks of a file are, so
    ``reduceat`` at their starts covers exactly each one.
    """
    if statistic == "min":
        return np.minimum.reduceat(values, starts).astype(np.float64)
    if statistic == "max":
        return np.maximum.reduceat(values, starts).astype(np.float64)
    total = np.add.reduceat(values, starts).astype(np.float64)
    return total / counts if statistic == "mean" else total


def _reduce_missing(values: np.ndarray, starts: np.ndarray, statistic: str) -> np.ndarray:
    """Like :func:`_reduce` over non-empty segments, ignoring NaN (missing) values;
    NaN where a segment has no value at all."""
    if len(starts) == 0:
        return np.zeros(0)
    given = np.add.reduceat(~np.isnan(values), starts)
    if statistic == "min":
        out = np.fmin.reduceat(values, starts)
    elif statistic == "max":
        out = np.fmax.reduceat(values, starts)
    else:
        out = np.add.reduceat(np.nan_to_num(values, nan=0.0), starts)
        if statistic == "mean":
            out = out / np.maximum(given, 1)
    return np.where(given > 0, out, np.nan)


def mpi_per_node(profile: Profile) -> Dict[str, np.ndarray]:
    """The MPI calls of each (callpath, rank), arrays of shape (len(callpaths), nranks):
    ``time`` (seconds), ``bytes`` and ``calls`` made while the callpath was
    current (exclusive), and ``time (inc)``, ``bytes (inc)``, ``calls (inc)``
    over the callpath and its descendants. Calls outside any event (callpath
    ``()``) belong to no callpath and are left out."""
    parent = parents(profile)
    out: Dict[str, np.ndarray] = {}
    for name, exclusive in mpi_exclusive(profile.mpi_data.ops, profile.callpaths,
                                         profile.nranks).items():
        out[name], out[f"{name} (inc)"] = exclusive, inclusive(exclusive, parent)
    # Summed in ns as integers: one division keeps the times exact.
    for name in ("time", "time (inc)"):
        out[name] = out[name] / PER_SECOND[profile.unit]
    return out


def outermost(profile: Profile, agg: Aggregates) -> np.ndarray:
    """Per (callpath, rank): whether it has values and no enclosing callpath
    has any on that rank."""
    ran = agg.count > 0
    covered = np.zeros_like(ran)
    out = np.zeros_like(ran)
    row = {path: i for i, path in enumerate(profile.callpaths)}
    for i, path in enumerate(profile.callpaths):         # parents first
        above = covered[row[path[:-1]]] if len(path) > 1 else np.zeros(ran.shape[1], dtype=bool)
        out[i] = ran[i] & ~above
        covered[i] = ran[i] | above
    return out


def run_times(profile: Profile, agg: Aggregates) -> np.ndarray:
    """Each rank's recorded run time (seconds): the inclusive time of its
    outermost callpaths with values. Those are the roots once they closed; in
    a snapshot taken while a root was still open (at a SIGTERM, say) the root
    has no value yet, and the time is that of the outermost regions that closed."""
    return np.where(outermost(profile, agg), agg.time_inc, 0.0).sum(axis=0)


@dataclass
class Summary:
    """``tinyprof show``'s numbers per callpath, rows as ``profile.callpaths``.

    One basis, POP's (docs/pop.md): min, mean and max are over all ranks of
    the run, a rank that did not run the callpath counting 0, and ``ranks``
    says how many ran it. Times are seconds per rank, summed over executions
    and occurrences. NaN where no rank ran the callpath."""

    ranks: np.ndarray           # int64: ranks with values
    minimum: np.ndarray         # of the inclusive time
    mean: np.ndarray            # of the inclusive time
    maximum: np.ndarray         # of the inclusive time
    exclusive_mean: np.ndarray
    share: np.ndarray           # mean / the mean run time (run_times): its part of the run
    imbalance: np.ndarray       # maximum / mean (NaN where the mean is 0)
    slowest: np.ndarray         # int64: the rank of the maximum, -1 where none ran it
    load_balance: Optional[np.ndarray]      # POP's, with MPI capture; None without
    open_roots: List[str]       # roots still open when written: the run time is what closed inside


def summary(profile: Profile, agg: Optional[Aggregates] = None) -> Summary:
    """``tinyprof show``'s numbers for ``profile`` (:class:`Summary`), also
    the report's call tree; ``agg``: its ``aggregate(profile, "sum")``, if
    the caller has it already."""
    agg = aggregate(profile, "sum") if agg is None else agg
    ran = agg.count > 0
    some = ran.any(axis=1)
    first = outermost(profile, agg)
    run = float(run_times(profile, agg).mean())

    def over_all(values: np.ndarray) -> np.ndarray:
        return np.where(some, values, np.nan)

    inc = np.where(ran, agg.time_inc, 0.0)
    mean = over_all(inc.mean(axis=1))
    maximum = over_all(inc.max(axis=1, initial=0.0))
    imbalance = np.where(mean > 0, maximum / np.where(mean > 0, mean, 1.0), np.nan)
    share = mean / run if run else np.full(len(mean), np.nan)
    balance = np.asarray(pop(profile)["load_balance"], np.float64) if profile.mpi_recorded else None
    return Summary(
        ranks=ran.sum(axis=1).astype(np.int64), minimum=over_all(inc.min(axis=1)),
        mean=mean, maximum=maximum,
        exclusive_mean=over_all(np.where(ran, agg.time_exc, 0.0).mean(axis=1)),
        share=share, imbalance=imbalance,
        slowest=np.where(some, np.where(ran, agg.time_inc, -np.inf).argmax(axis=1), -1).astype(np.int64),
        load_balance=balance,
        open_roots=sorted({p[0] for p, row in zip(profile.callpaths, first) if len(p) > 1 and row.any()}))
