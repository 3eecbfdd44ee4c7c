"""A profile read back from disk: :func:`read` and :class:`Profile`."""
from __future__ import annotations

import bisect
import concurrent.futures
import os
import warnings
from functools import cached_property
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import FormatError, excerpt
from ..format import output_dir, snapshot_chain
from ..format.encoding import Header
from ..format.parsed import EventData, ParsedFile
from . import mpi_tables, symbolize
from .callpaths import Spec, Tree
from .sums import PER_SECOND

Callpath = Tuple[str, ...]     # a format.callpath.Callpath: equal to, and hashed as, the tuple of its names


class Profile:
    """All ranks of one profile, merged from its files.

    ``callpaths`` lists every callpath (tuples of names) in file order;
    :meth:`series` gives the values of one callpath on one rank. With MPI
    capture (``Profiler(mpi=True)``), :attr:`mpi`, :attr:`communicators` and
    :meth:`comm_matrix` give the communication (docs/mpi.md).
    """

    def __init__(self, files: Sequence[ParsedFile]) -> None:
        files = sorted(files, key=lambda f: f.header.first_rank)
        head = files[0].header
        self.name: str = head.name
        self.nranks: int = head.nranks
        self.metrics: List[Tuple[str, bool]] = list(head.metrics)
        self.unit: str = head.unit
        self.created: str = head.created
        self.version: str = head.version
        self.run: str = head.run                  # "" for version-1 files
        self.set: Optional[Tuple[str, int]] = (    # ("flush", n) or ("snapshot", k)
            (head.set_kind, head.set_number) if head.format_version >= 2 else None)
        self.files: List[str] = [f.path for f in files]
        # the run's metadata (docs/format.md, "The meta section"): file 0's, {} if none
        self.metadata: Dict[str, Union[str, int, float]] = dict(files[0].metadata)
        self.snapshot: Optional[int] = None     # set by read(): the snapshot number read
        # set by read(): the run's older flushed set, whose trace a snapshot lacks
        self._traced: Optional[List[str]] = None
        self.parsed: List[ParsedFile] = files     # the files as read, by first rank
        self._firsts = [f.header.first_rank for f in files]
        symbolize.resolve(files, self.metadata)     # a preloaded binary's C call sites, to lines
        known: Dict[Callpath, Callpath] = {}
        for f in files:
            f.share_paths(known)
        self.callpaths: List[Callpath] = list(known)

    def __repr__(self) -> str:
        return (f"<tinyprof.Profile {excerpt(self.name)}: {self.nranks} ranks, "
                f"{len(self.callpaths)} callpaths, {len(self.parsed)} file(s)>")

    def _locate(self, rank: int) -> Tuple[ParsedFile, int]:
        if not 0 <= rank < self.nranks:
            raise IndexError(f"rank {rank} out of range: the profile has {self.nranks} ranks")
        f = self.parsed[bisect.bisect_right(self._firsts, rank) - 1]
        return f, rank - f.header.first_rank

    def executions(self, rank: int) -> int:
        """Number of executions recorded on ``rank``."""
        f, r = self._locate(rank)
        return f.header.executions[r]

    @cached_property
    def _tree(self) -> Tree:
        return Tree(self.callpaths, f"profile {excerpt(self.name)}")

    def callpath(self, callpath: Spec) -> Callpath:
        """The profile's callpath that ``callpath`` names: a sequence of names,
        root first, or a string, one region's name or a path written as the
        commands print it (``"main<solve"``, or ``"main/solve"``); KeyError if
        the profile has none. Every method taking a callpath reads it so."""
        return self._tree.get(callpath)

    def _events(self, callpath: Spec) -> List[EventData]:
        """The callpath's event line in each file that has it, in file order."""
        path = self.callpath(callpath)
        return [ev for ev in (f.events.get(path) for f in self.parsed) if ev is not None]

    def loop(self, callpath: Spec) -> int:
        """Loop mode of ``callpath``: 0 plain, 1 per iteration, 2 summed per execution."""
        return self._events(callpath)[0].loop

    def value(self, callpath: Spec, metric: str) -> Optional[float]:
        """The value of a consistent metric on ``callpath`` (None if never given)."""
        self._check_metric(metric, consistent=True)
        return next((ev.consistent[metric] for ev in self._events(callpath)
                     if metric in ev.consistent), None)

    def series(self, callpath: Spec, rank: int, metric: str = "time") -> List[List[float]]:
        """Values of ``callpath`` on ``rank``: one list per execution of that rank,
        each holding the value of every occurrence (iteration) in order.

        ``time`` is in seconds; an inconsistent custom metric is as recorded,
        NaN where an occurrence gave none. A rank that never ran the event
        gets one empty list per execution.
        """
        if metric != "time":
            self._check_metric(metric, consistent=False)
        path = self.callpath(callpath)
        f, r = self._locate(rank)
        nexec = f.header.executions[r]
        ev = f.events.get(path)
        if ev is None:
            return [[] for _ in range(nexec)]
        # This rank's slots (executions with values) alone: the work is this
        # rank's, not the file's executions times its callpaths.
        base = int(f.exec_base[r])
        a, b = np.searchsorted(ev.slots, [base, base + nexec])
        firsts = np.cumsum(ev.counts) - ev.counts
        values = ev.times / PER_SECOND[self.unit] if metric == "time" else ev.metrics[metric]
        out: List[List[float]] = [[] for _ in range(nexec)]
        for slot, first, n in zip(ev.slots[a:b].tolist(), firsts[a:b].tolist(), ev.counts[a:b].tolist()):
            out[slot - base] = values[first:first + n].tolist()
        return out

    @cached_property
    def mpi_data(self) -> mpi_tables.MpiData:
        """Every rank's MPI rows as read; the tables below are built from it."""
        return mpi_tables.load(self.parsed)

    @property
    def mpi_recorded(self) -> bool:
        """Whether MPI communication was recorded (``Profiler(mpi=True)``)."""
        return self.mpi_data.recorded

    @property
    def mpi(self) -> Any:
        """MPI calls as a pandas DataFrame, one row per (callpath, rank, comm,
        op, size bucket): ``callpath`` (a tuple; ``()`` outside any event),
        ``rank``, ``comm`` (``""`` for completion calls: Wait*, Test*), ``op``
        (``"Allreduce"``), ``bucket``, ``size_min`` and ``size_max`` (bytes per
        call), ``calls``, ``bytes`` and ``time`` (seconds). Empty without capture."""
        return mpi_tables.table(self.mpi_data, PER_SECOND[self.unit])

    @property
    def transport(self) -> Any:
        """The transport view (``Profiler(ucx=True)``) as a pandas DataFrame,
        one row per (callpath, rank, op, ucp_op, protocol, transport):
        ``op`` the MPI call (``""`` outside any), ``ucp_op`` the UCP operation
        it made (``"tag_send"``, ``"tag_recv"``, ``"put"``, ...), ``protocol``
        and ``transport`` as UCX selected them (``""`` for receives: the
        sender selects), ``calls`` and ``bytes``. Empty without it; see
        :attr:`ucx` for why a rank has no rows."""
        return mpi_tables.transport(self.mpi_data)

    @property
    def ucx(self) -> Dict[int, str]:
        """Per rank that recorded the transport view, whether UCX carried its
        MPI traffic: ``"used"``; ``"unused"`` (UCX is there but carried none:
        MPICH's own shared memory between ranks of a node, another netmod);
        ``"unavailable"`` (this MPI does not call UCX)."""
        return dict(sorted(self.mpi_data.ucx.items()))

    @property
    def communicators(self) -> Any:
        """The communicators as a pandas DataFrame: ``comm`` (its name, the same
        on every member), ``size``, ``world_ranks`` (a tuple in rank order;
        empty for COMM_SELF and its kind) and ``created`` (the creating
        callpath, None for predefined ones or outside any event)."""
        return mpi_tables.communicators(self.mpi_data)

    def comm_matrix(self, callpath: Optional[Spec] = None, comm: Optional[str] = None,
                    metric: str = "bytes") -> Any:
        """numpy (P, P) int64: entry ``[i, j]`` holds the bytes (``metric=
        "messages"``: the messages) that rank i sent point-to-point to world
        rank j, within ``callpath`` and the regions below it (None: the whole
        run; KeyError for one not in the profile), on communicator ``comm``
        (None: all)."""
        inside = None if callpath is None else \
            self._tree.within([callpath])
        return mpi_tables.matrix(self.mpi_data, self.nranks, inside, comm, metric)

    @cached_property
    def trace(self) -> Any:
        """The trace (``Profiler(trace=True)``): every occurrence and MPI call
        of every rank on one clock, messages matched (a ``tinyprof.analysis.trace.Trace``;
        docs/trace.md). Raises ValueError when the profile holds no trace.
        A snapshot of a traced run holds none (docs/trace.md): read from
        the output directory, its trace is that of the run's flushed set."""
        from . import trace
        if self._traced and not any("trace" in f.sections for f in self.parsed):
            flushed = Profile(_parse_all(self._traced, None))
            if flushed.run == self.run and any("trace" in f.sections for f in flushed.parsed):
                return flushed.trace
        return trace.from_files(self.parsed, self.callpaths, self.nranks, self.unit)

    def critical_path(self) -> Any:
        """The critical path through the traced run, as a pandas DataFrame of
        segments in time order: ``rank``, ``callpath`` (a tuple), ``op`` (the MPI
        operation, ``""`` for computation), ``start`` (seconds since the first
        record) and ``duration`` (seconds). See docs/trace.md."""
        from . import trace
        return trace.critical_path(self.trace)

    def critical_path_summary(self) -> Any:
        """The critical path per (rank, callpath), largest first: ``time`` on
        the path and ``mpi``, its part in MPI calls (seconds), and ``share``
        of the path's length."""
        from . import trace
        return trace.critical_path_summary(self.trace)

    def wait_states(self) -> Any:
        """Waiting time in MPI calls per (callpath, rank), in seconds, largest
        first: ``late_sender``, ``late_receiver``, ``wait_collective``,
        ``wait_barrier`` and ``total`` (Scalasca's patterns; docs/trace.md)."""
        from . import trace
        return trace.wait_states(self.trace)

    def pop(self, callpath: Optional[Spec] = None, hosts: Any = None,
            trace: bool = False) -> Any:
        """The POP efficiency metrics per callpath (docs/pop.md) as a pandas
        DataFrame, one row per callpath (``callpath`` and the regions below
        it; None: all), each inclusive of the regions below it: ``callpath``,
        ``ranks`` (that recorded it), ``runtime`` (the largest inclusive time
        over those ranks, seconds), ``useful_mean`` and ``useful_max`` (useful
        time: inclusive time outside the MPI calls recorded there and below),
        ``load_balance`` (mean over max useful time), ``communication_efficiency``
        (max useful time over runtime) and ``parallel_efficiency`` (their
        product). With ``hosts`` (a host name per rank: a sequence, a
        mapping from rank, or ``"n1*64,n2*64"`` as ``--hosts``), also
        ``hosts`` and TALP's ``load_balance_in`` and ``load_balance_out``
        (within and across nodes); by default the hosts
        the run metadata records (``rank_hosts``), when the run spanned
        several. With ``trace=True``
        (a traced profile), also ``ideal_runtime`` (the runtime replayed on an
        ideal network), ``serialization_efficiency`` (max useful time over it)
        and ``transfer_efficiency`` (it over the runtime). Needs MPI capture:
        ``PopError`` (a ValueError) otherwise."""
        import pandas as pd

        from . import pop
        return pd.DataFrame(pop.pop(self, callpath, hosts, trace))

    def _check_metric(self, metric: str, consistent: bool) -> None:
        kinds = dict(self.metrics)
        if metric not in kinds:
            raise KeyError(f"no metric {excerpt(metric)} in profile {excerpt(self.name)} "
                           f"(metrics: {excerpt(', '.join(['time', *kinds]), 200)})")
        if kinds[metric] != consistent:
            use = "value(callpath, metric)" if kinds[metric] else "series(callpath, rank, metric)"
            raise ValueError(f"metric {excerpt(metric)} is {'' if kinds[metric] else 'in'}consistent: "
                             f"use Profile.{use}")


def read(path: Union[str, os.PathLike[str]], snapshot: Optional[int] = None,
         threads: Optional[int] = None) -> Profile:
    """Read a profile: its output directory, or any one file of it.

    For an output directory, the newest complete profile in it: the set that
    ``flush()`` wrote or the newest complete snapshot, whichever was completed
    last. ``snapshot=k`` reads snapshot ``k`` (see :func:`snapshots`).
    The files are parsed by ``threads`` threads (None: one per core this
    process may use); the parser releases the GIL while it scans values.
    Raises :class:`FormatError` naming the file (and line) when a file is
    missing, truncated, corrupted, of another format or of a newer version.
    """
    path = os.fspath(path)
    traced, number = None, snapshot
    if snapshot is not None:
        paths = output_dir.snapshot_files(path, snapshot)
    else:
        paths, number, note, traced = output_dir.newest(path)
        if note:
            warnings.warn(f"tinyprof: {path}: {note}", RuntimeWarning, stacklevel=2)
    files = _parse_all(paths, threads)
    _check_set(files)
    head = files[0].header
    if snapshot is not None and head.format_version >= 2 and \
            (head.set_kind, head.set_number) != ("snapshot", snapshot):
        raise FormatError(files[0].path, None, f"in the directory of snapshot {snapshot}, but "
                                               f"it is {_set_name(head)} (a renamed directory?)")
    profile = Profile(files)
    profile.snapshot = number
    profile._traced = traced
    return profile


def read_many(paths: Sequence[Union[str, os.PathLike[str]]], errors: str = "raise",
              threads: Optional[int] = None) -> List[Profile]:
    """Read many runs (each as :func:`read` does: an output directory or a file
    of one), ``threads`` at a time (None: one per core this process may use),
    in the order given; each has its run's ``metadata``.

    ``errors="raise"``: the first failing path's :class:`FormatError` (or
    ``OSError``), in the order given. ``errors="skip"``: a failing path is
    left out with a ``RuntimeWarning`` naming it and the problem, and the
    others are read. The C parser releases the GIL, so the threads use every core.
    """
    if errors not in ("raise", "skip"):
        raise ValueError(f"errors must be 'raise' or 'skip', not {errors!r}")

    def one(path: Union[str, os.PathLike[str]]) -> Union[Profile, FormatError, OSError]:
        try:
            return read(path, threads=1)
        except (FormatError, OSError) as e:
            return e

    with concurrent.futures.ThreadPoolExecutor(_threads(len(paths), threads),
                                               thread_name_prefix="tinyprof-read") as pool:
        got = list(pool.map(one, paths))
    out = []
    for path, item in zip(paths, got):
        if isinstance(item, Profile):
            out.append(item)
        elif errors == "raise":
            raise item
        else:
            warnings.warn(f"tinyprof: skipped {os.fspath(path)}: {item}", RuntimeWarning,
                          stacklevel=2)
    return out


def _threads(jobs: int, threads: Optional[int]) -> int:
    if threads is None:
        threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(jobs, threads or 1))


def _parse_all(paths: List[str], threads: Optional[int]) -> List[ParsedFile]:
    """The files parsed, in order; the first failing one's FormatError."""
    threads = _threads(len(paths), threads)
    if threads < 2:
        return [snapshot_chain.parse(p) for p in paths]
    with concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="tinyprof-read") as pool:
        return list(pool.map(snapshot_chain.parse, paths))


def snapshots(path: Union[str, os.PathLike[str]]) -> List[int]:
    """Numbers of the complete snapshots in the output directory ``path``,
    oldest first (``Profiler(keep="all")`` keeps every one; ``"last"`` the newest)."""
    return output_dir.complete_snapshots(os.fspath(path))


def _check_set(files: List[ParsedFile]) -> None:
    """The files (in index order) are one whole profile of one flush or snapshot
    of one run: every rank exactly once."""
    head = files[0].header
    covered = 0
    for index, f in enumerate(files):
        h = f.header
        if (h.name, h.nranks, h.file_count, h.metrics) != (head.name, head.nranks,
                                                           head.file_count, head.metrics):
            raise FormatError(f.path, None, f"does not belong with {files[0].path}")
        if (h.run, h.set_kind, h.set_number) != (head.run, head.set_kind, head.set_number):
            raise FormatError(f.path, None, f"from another flush/run: {_set_name(h)}, "
                                            f"{files[0].path} is from {_set_name(head)}")
        if (h.file_index, h.file_count) != (index, len(files)):
            raise FormatError(f.path, None, f"header says file {h.file_index} of {h.file_count}, "
                                            f"expected file {index} of {len(files)}")
        if h.first_rank != covered:
            raise FormatError(f.path, None, f"holds ranks from {h.first_rank}, expected {covered}")
        covered += h.rank_count
    if covered != head.nranks:
        raise FormatError(files[-1].path, None, f"files cover {covered} of {head.nranks} ranks")


def _set_name(h: Header) -> str:
    if h.format_version < 2:
        return "a version-1 file (no run id)"
    return f"run {h.run} {h.set_kind} {h.set_number}"


def read_runs(runs: Sequence[Union[Profile, str, os.PathLike[str]]], errors: str = "raise",
              of_snapshots: bool = False) -> Tuple[List[Profile], List[str], bool]:
    """The runs of a history, oldest first (by the run metadata's ``start``,
    else the files' creation time; the order given on a tie), their labels
    (each run's path without the directories all share), and whether they
    are cumulative (the snapshots of one run).

    ``runs``: profiles, or paths, each a run or a directory of runs
    (``output_dir.runs_in``), read by :func:`read_many` (``errors`` as there);
    ``of_snapshots``: the kept snapshots of the one output directory given."""
    if of_snapshots:
        if len(runs) != 1 or isinstance(runs[0], Profile):
            raise ValueError("the snapshots of one run: give one output directory")
        outdir = os.fspath(runs[0])
        numbers = snapshots(outdir) if os.path.isdir(outdir) else []
        if len(numbers) < 2:
            raise FormatError(outdir, None, f"{len(numbers)} complete snapshot(s): the history of "
                                            "a run needs at least 2, kept with Profiler(keep='all')")
        return [read(outdir, snapshot=k) for k in numbers], [f"snapshot {k}" for k in numbers], True
    given = [p for p in runs if isinstance(p, Profile)]
    names = output_dir.runs_in([os.fspath(p) for p in runs if not isinstance(p, Profile)])
    if not names and not given:
        raise ValueError("no run given")
    loaded = iter(read_many(names, errors=errors))     # in order, without those skipped
    found: List[Tuple[Profile, int, str]] = [(p, i, os.path.dirname(p.files[0])) for i, p in enumerate(given)]
    profile = next(loaded, None)
    for i, name in enumerate(names, len(given)):
        if profile is not None and _read_from(name, profile):
            found.append((profile, i, name))
            profile = next(loaded, None)
    if not found:
        raise ValueError("no run could be read")
    found.sort(key=lambda run: (str(run[0].metadata.get("start") or run[0].created), run[1]))
    return [p for p, _, _ in found], _labels([name for _, _, name in found]), False


def _read_from(path: str, profile: Profile) -> bool:
    """Whether ``profile`` was read from ``path`` (a file of it, or a directory above it)."""
    where, first = os.path.abspath(path), os.path.abspath(profile.files[0])
    if os.path.isdir(where):
        return first.startswith(os.path.join(where, ""))
    return where in map(os.path.abspath, profile.files)


def _labels(paths: List[str]) -> List[str]:
    """Each run's path without the directories all share."""
    if len(paths) < 2:
        return [os.path.basename(os.path.normpath(p)) or p for p in paths]
    try:
        common = os.path.commonpath([os.path.abspath(p) for p in paths])
    except ValueError:
        return paths
    return [os.path.relpath(os.path.abspath(p), common) for p in paths]
