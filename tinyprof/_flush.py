"""``flush()``: write the event map as a profile.

One process writes one file. Under MPI the three-phase flush of the paper
(Section V, ``_mpi.py``) spreads the same steps over ranks: (1) agree on one
ordered callpath list, (2) gather the encoded rank fields to aggregators, (3)
one atomic write per aggregator. The steps shared by both paths live here.
"""
from __future__ import annotations

import os
import sys
import warnings
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from . import _annotate
from ._eventmap import LocalEvent, collect
from ._format import (SUFFIX, Header, encode_consistent, encode_file, encode_rank_field,
                      file_name, write_atomic)
from ._profile import _SET_RE
from ._profiler import Profiler, active

Callpath = Tuple[str, ...]

# Seconds this rank spent in the last MPI flush (benchmarks): "encode" (copy and
# encode the event map), then the phases "sync", "gather" and "write".
last_timings: Dict[str, float] = {}


def flush() -> Optional[str]:
    """Write the profile recorded so far and return the output directory.

    Collective over the profiler's communicator when MPI is in use: every rank
    must call it. Recording goes on afterwards; a later flush rewrites the
    profile with everything recorded until then. Returns None when profiling
    is switched off (``TINYPROF=0``).
    """
    if not _annotate.ENABLED:
        return None
    impl = _annotate.impl
    if impl.current() is not impl.root():
        raise RuntimeError(f"tinyprof.flush() called inside the open event "
                           f"{'<'.join(_open_path(impl.current()))!r}: flush outside every event")
    prof = active()
    comm = _mpi_comm(prof)
    if comm is not None:
        from . import _mpi     # imports mpi4py, which the application already did
        if _mpi.flush(prof, comm):
            prof.flushed = True
        return prof.outdir
    events, executions = collect(impl.root()), impl.executions()
    data = build_file(_header(prof, 1, 0, 1, 0, 1), [events], [executions])
    path = os.path.join(prof.outdir, file_name(prof.name, 0, 1))
    failure = write_file(prof.outdir, path, data)
    if failure:
        warnings.warn(f"tinyprof: cannot write profile file {path}: {failure}; "
                      "the data stays in memory for the next flush", RuntimeWarning, stacklevel=2)
        return prof.outdir
    prof.flushed = True
    for path in stale_sets(prof.outdir, prof.name, 1):
        remove(path)
    return prof.outdir


def write_file(directory: str, path: str, data: bytes) -> Optional[str]:
    """Create ``directory`` and write ``path`` in it atomically; why not, if it
    cannot (any ``OSError``: the callers warn, and the application goes on)."""
    try:
        os.makedirs(directory, exist_ok=True)
        write_atomic(path, data)
    except OSError as e:
        return str(e.strerror or e)
    return None


def _mpi_comm(prof: Profiler) -> Any:
    """The communicator to flush over, or None for a single-process flush.

    tinyprof never initialises MPI: without ``Profiler(comm=...)`` the flush is
    collective only if the application imported mpi4py.MPI and MPI is live.
    """
    if prof.comm is not None:
        return prof.comm
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        return mpi.COMM_WORLD
    return None


def _open_path(node) -> List[str]:
    path = []
    while node.parent is not None:
        path.append(node.name)
        node = node.parent
    return path[::-1]


def _header(prof: Profiler, nranks: int, first: int, count: int, index: int, nfiles: int) -> Header:
    return Header(name=prof.name, nranks=nranks, first_rank=first, rank_count=count,
                  file_index=index, file_count=nfiles, metrics=list(prof.metrics))


def stale_sets(outdir: str, name: str, count: int) -> List[str]:
    """Files of older sets of profile ``name`` in ``outdir`` whose file count
    is not ``count``: they must go, or ``read(outdir)`` finds two profiles."""
    stem = file_name(name, 0, 1)[:-len(".0-of-1" + SUFFIX)]
    matches = ((entry, _SET_RE.match(entry)) for entry in os.listdir(outdir))
    return [os.path.join(outdir, entry) for entry, m in matches
            if m and m["name"] == stem and int(m["count"]) != count]


def remove(path: str) -> None:
    """Remove a file that another process may have removed already."""
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def union_order(lists: Iterable[Sequence[Callpath]]) -> List[Callpath]:
    """Callpaths of all lists, each once, in order of first appearance.

    Each list is in pre-order, so a prefix always precedes its callpath in
    the union too.
    """
    order: Dict[Callpath, None] = {}
    for paths in lists:
        order.update(dict.fromkeys(paths))
    return list(order)


FieldEncoder = Callable[[LocalEvent, Sequence[str]], bytes]


def encode_field(e: LocalEvent, inconsistent: Sequence[str]) -> bytes:
    """The rank field of ``e`` (inconsistent metrics ``inconsistent``)."""
    return encode_rank_field(e.times, e.execs, e.metric_columns(inconsistent))


def encode_fields(events: Sequence[LocalEvent], order: Sequence[Callpath],
                  inconsistent: Sequence[str], encode: FieldEncoder = encode_field) -> List[bytes]:
    """This rank's field for every callpath of ``order`` (empty where it has none)."""
    by_path = {e.path: e for e in events}
    fields = []
    for path in order:
        e = by_path.get(path)
        fields.append(b"" if e is None else encode(e, inconsistent))
    return fields


def build_file(header: Header, ranks: Sequence[Sequence[LocalEvent]],
               executions: Sequence[int], encode: FieldEncoder = encode_field) -> bytes:
    """The file holding ``ranks`` (the events of consecutive ranks, in order);
    ``encode`` gives each rank field."""
    order = union_order([e.path for e in events] for events in ranks)
    inconsistent = [k for k, c in header.metrics if not c]
    consistent = [k for k, c in header.metrics if c]
    loops: Dict[Callpath, int] = {}
    values: Dict[Callpath, Dict[str, float]] = {}
    for events in ranks:                       # lowest rank first: its values win
        for e in events:
            merge_loop(loops, e.path, e.loop)
            merged = values.setdefault(e.path, {})
            for k, v in e.consistent.items():
                merged.setdefault(k, v)
    header.executions = list(executions)
    names, parents, ids = name_table(order)
    return encode_file(header, names, parents, ids, [loops[p] for p in order],
                       [encode_consistent(values[p], consistent) for p in order],
                       [encode_fields(events, order, inconsistent, encode) for events in ranks])


def merge_loop(loops: Dict[Callpath, int], path: Callpath, loop: int) -> None:
    """Record ``loop`` for ``path``, going through ranks from the lowest.

    Ranks that disagree on a callpath's loop mode get the lowest rank's mode,
    except that mode 2 (at most one value per execution) gives way to the
    first mode 0 or 1: the values of such a rank would not fit a mode-2 line.
    """
    if loops.get(path, 2) == 2:
        loops[path] = loop


def name_table(order: Sequence[Callpath]) -> Tuple[List[str], List[int], List[int]]:
    """Event names in order of first use, and each callpath (in pre-order) as
    its parent's index in ``order`` (-1 for a root) and its last name's id."""
    lines = {path: i for i, path in enumerate(order)}
    table: Dict[str, int] = {}
    ids = [table.setdefault(path[-1], len(table)) for path in order]
    parents = [lines.get(path[:-1], -1) for path in order]
    return list(table), parents, ids
