"""Time and efficiency over the kept snapshots of a run (docs/pop.md, "Over
time"): per interval between consecutive snapshots, the differences of their
cumulative values per (callpath, rank). ``tinyprof.pop_history`` gives the
POP metrics of each interval; :func:`series` reads each snapshot once for
both those and the exclusive time per callpath (the report's charts)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import excerpt
from . import pop
from .callpaths import spelled
from .profile import PER_SECOND, Profile, read, snapshots
from .sums import parent_rows
from .values import occurrences

HISTORY_COLUMNS = ["snapshot", "created"]
Outdir = Union[str, os.PathLike[str]]


def pop_history(outdir: Outdir, callpath: Optional[pop.Spec] = None,
                hosts: Optional[pop.Hosts] = None, numbers: Optional[Sequence[int]] = None) -> Any:
    """``tinyprof.pop_history``: the metrics of each interval between
    consecutive kept snapshots (the first from the start of the run), from
    the differences of their cumulative values, as a pandas DataFrame. One
    row per (snapshot, callpath) whose time grew in that interval on some
    rank; ``numbers``: the snapshots to use (default: every complete one;
    taken oldest first whatever their order); ``hosts`` as for
    ``Profile.pop`` (None: the recorded ones). PopError (a ValueError)
    without snapshots or without MPI data in one; KeyError for a
    ``callpath`` that no snapshot holds."""
    import pandas as pd

    return pd.DataFrame(history(outdir, callpath, hosts, numbers))


def known_time(profile: Profile) -> Tuple[np.ndarray, np.ndarray]:
    """Per (callpath, rank) of a snapshot, in ``profile.callpaths`` order:
    the number of values recorded, and the inclusive time known so far, in
    the file's unit (int64). That is the sum of its values, plus, for an
    occurrence still open at the snapshot, the known time of the regions
    below it in its execution. A snapshot holds no value of an open
    occurrence (its start is only in the application's ``Event``), but the
    regions that closed inside it are part of its time so far. An
    occurrence is open in an execution of a rank where a region below it
    has a value and it has none; its own time outside those regions (its
    own MPI calls included) counts when it closes."""
    occ = occurrences(profile)
    shape = (len(profile.callpaths), profile.nranks)
    count = np.zeros(shape, np.int64)
    inc = np.zeros(shape, np.int64)
    np.add.at(count, (occ.callpath, occ.rank), 1)
    np.add.at(inc, (occ.callpath, occ.rank), occ.time_ns)
    if not len(occ.time_ns):
        return count, inc
    # One code per (callpath, rank, execution): callpath * runs + run.
    per_rank = np.int64(occ.execution.max()) + 1
    runs = np.int64(profile.nranks) * per_rank
    code = (occ.callpath.astype(np.int64) * runs + occ.rank.astype(np.int64) * per_rank
            + occ.execution)
    # occurrences come ordered by callpath, rank, execution: so do the codes
    starts = np.flatnonzero(np.concatenate([[True], code[1:] != code[:-1]]))
    closed, values = code[starts], np.add.reduceat(occ.time_ns, starts)
    parent = parent_rows(profile.callpaths)
    # The known time of each (callpath, rank, execution) goes up to its
    # parent wherever that has no value, and on up while they have none.
    codes = closed
    while True:
        row, run = np.divmod(codes, runs)
        target = parent[row] * runs + run
        pending = (parent[row] >= 0) & ~np.isin(target, closed)
        if not pending.any():
            return count, inc
        codes, where = np.unique(target[pending], return_inverse=True)
        values, carried = np.zeros(len(codes), np.int64), values[pending]
        np.add.at(values, where, carried)
        row, run = np.divmod(codes, runs)
        np.add.at(inc, (row, run // per_rank), values)


@dataclass
class Interval:
    """What the ranks did between two consecutive snapshots, per (callpath,
    rank) of ``callpaths`` (those of the snapshot that ends it)."""

    snapshot: int                   # the number of the snapshot that ends it
    created: str                    # its time stamp
    nranks: int
    callpaths: List[pop.Callpath]
    grew: np.ndarray                # bool: the callpath's known time (or its values) grew on that rank
    inc: np.ndarray                 # float64 s: the inclusive time known (known_time) spent in it
    mpi: Optional[np.ndarray]       # float64 s: the inclusive MPI time; None: the snapshot has none


def intervals(outdir: Outdir, numbers: Sequence[int]) -> Iterator[Tuple[Profile, Interval]]:
    """Each snapshot of ``numbers`` (in that order), read once, with the
    interval it ends: the difference of its cumulative values per
    (callpath, rank) with the snapshot before (the first: with the start of
    the run, where all are 0)."""
    index: Dict[pop.Callpath, int] = {}
    old: Tuple[Optional[np.ndarray], ...] = (None, None, None)
    for k in numbers:
        snap = read(outdir, snapshot=k)
        count, inc_ns = known_time(snap)
        now = (count, inc_ns, pop.per_rank(snap)[2] if snap.mpi_recorded else None)
        at = np.array([index.get(p, -1) for p in snap.callpaths], np.int64)
        d_count, d_inc, d_mpi = (None if a is None else a - _aligned(b, at) for a, b in zip(now, old))
        assert d_count is not None and d_inc is not None
        # in ns as integers until here: an interval's time is exact
        yield snap, Interval(k, snap.created, snap.nranks, list(snap.callpaths),
                             (d_inc > 0) | (d_count > 0), d_inc / PER_SECOND[snap.unit], d_mpi)
        index, old = {p: i for i, p in enumerate(snap.callpaths)}, now


def _aligned(before: Optional[np.ndarray], at: np.ndarray) -> Any:
    """The rows ``at`` of the previous snapshot's ``before`` (0 where -1: a
    callpath new since, or no previous snapshot)."""
    if before is None or not len(before):
        return 0
    return np.where((at >= 0)[:, None], before[np.maximum(at, 0)], 0)


class _PopRows:
    """The columns of ``pop_history``, an interval at a time."""

    def __init__(self, outdir: str, callpath: Optional[pop.Spec], hosts: Optional[pop.Hosts]):
        self.outdir, self.callpath, self.hosts = outdir, callpath, hosts
        self.parts: Dict[str, List[Any]] = {}
        self.known = False          # some snapshot has the callpath

    def add(self, snap: Profile, step: Interval) -> None:
        if not self.parts:          # every snapshot of a run records the same hosts
            self.hosts = pop.recorded_hosts(snap) if self.hosts is None else self.hosts
            self.parts = {name: [] for name in HISTORY_COLUMNS + pop.COLUMNS
                          + (pop.HOST_COLUMNS if self.hosts is not None else [])}
        if step.mpi is None:
            raise pop.PopError(f"{self.outdir}: snapshot {step.snapshot} holds no MPI data: the "
                               "metrics over time need the MPI time in every snapshot (record with "
                               "Profiler(mpi=True) or TINYPROF_MPI=1; an older C++ header's "
                               "snapshots hold none)")
        keep = pop.below(step.callpaths, self.callpath)
        if not keep.any():
            return
        self.known = True
        paths = [p for p, k in zip(step.callpaths, keep) if k]
        cols = pop.columns(paths, step.grew[keep].astype(np.int64), step.inc[keep], step.mpi[keep],
                           pop.host_ids(self.hosts, step.nranks))
        cols["snapshot"] = np.full(len(paths), step.snapshot, np.int64)
        cols["created"] = [step.created] * len(paths)
        ran = cols["ranks"] > 0
        for name, part in self.parts.items():
            value = cols[name]
            part.append(value[ran] if isinstance(value, np.ndarray) else
                        [v for v, r in zip(value, ran) if r])

    def columns(self) -> pop.Columns:
        if self.callpath is not None and not self.known:
            raise KeyError(f"no callpath {excerpt(spelled(self.callpath))} in the snapshots of "
                           f"{self.outdir}")
        return {name: np.concatenate(p) if name not in ("callpath", "created") and p else
                [v for chunk in p for v in chunk] for name, p in self.parts.items()}


def _numbers(outdir: str, numbers: Optional[Sequence[int]]) -> List[int]:
    """The snapshots to use, oldest first (an interval is the difference with
    the snapshot before it); PopError when there are none."""
    chosen = snapshots(outdir) if numbers is None else sorted(set(numbers))
    if not chosen:
        raise pop.PopError(f"{outdir}: no complete snapshot: the metrics over time need the "
                           "snapshots of a run kept with Profiler(frequency=..., keep='all')")
    return chosen


def history(outdir: Outdir, callpath: Optional[pop.Spec] = None,
            hosts: Optional[pop.Hosts] = None, numbers: Optional[Sequence[int]] = None) -> pop.Columns:
    """The columns of ``pop_history``: lists and numpy arrays."""
    outdir = os.fspath(outdir)
    rows = _PopRows(outdir, callpath, hosts)
    for snap, step in intervals(outdir, _numbers(outdir, numbers)):
        rows.add(snap, step)
    return rows.columns()


@dataclass
class Series:
    """The kept snapshots of a run as time series, per interval between
    consecutive ones (the first from the start of the run)."""

    numbers: List[int]              # the snapshot that ends each interval
    created: List[str]              # its time stamp
    callpaths: List[pop.Callpath]   # every callpath of the snapshots, first seen first
    exclusive: np.ndarray           # (interval, callpath) s: exclusive time, summed over the ranks
    efficiency: Optional[pop.Columns]   # pop_history's columns; None if a snapshot holds no MPI data
    problem: str                    # ... then why, in one line ("" otherwise)


def series(outdir: Outdir, numbers: Sequence[int], hosts: Optional[pop.Hosts] = None) -> Series:
    """The snapshots ``numbers`` of ``outdir`` as time series, each read
    once: per interval, the exclusive time of each callpath summed over the
    ranks (its known inclusive time, see :func:`known_time`, less its
    children's) and ``pop_history``'s metrics."""
    outdir = os.fspath(outdir)
    numbers = _numbers(outdir, numbers)
    rows: Optional[_PopRows] = _PopRows(outdir, None, hosts)
    problem = ""
    column: Dict[pop.Callpath, int] = {}
    exclusive: List[Tuple[List[int], np.ndarray]] = []
    created = []
    for snap, step in intervals(outdir, numbers):
        created.append(step.created)
        total = step.inc.sum(axis=1)
        parent = parent_rows(step.callpaths)
        child = parent >= 0
        own = total.copy()
        np.subtract.at(own, parent[child], total[child])
        exclusive.append(([column.setdefault(p, len(column)) for p in step.callpaths], own))
        if rows is not None:
            try:
                rows.add(snap, step)
            except pop.PopError as e:       # the time series still stand
                rows, problem = None, str(e)
    table = np.zeros((len(numbers), len(column)))
    for j, (where, own) in enumerate(exclusive):
        table[j, where] = own
    return Series(numbers, created, list(column), table,
                  rows.columns() if rows is not None else None, problem)
