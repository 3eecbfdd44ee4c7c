"""``flush()``: write the event map as a profile.

One process writes one file. Under MPI the three-phase flush of the paper
(Section V) spreads the same steps over ranks: (1) agree on one ordered
callpath list, (2) gather the encoded rank fields to aggregators, (3) one
atomic write per aggregator. The steps shared by both paths live here.
"""
from __future__ import annotations

import os
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from . import _annotate
from ._eventmap import LocalEvent, collect
from ._format import Header, encode_consistent, encode_file, encode_rank_field, file_name, write_atomic
from ._profiler import Profiler, active

Callpath = Tuple[str, ...]


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
    events, executions = collect(impl.root()), impl.executions()
    data = build_file(_header(prof, 1, 0, 1, 0, 1), [events], [executions])
    os.makedirs(prof.outdir, exist_ok=True)
    write_atomic(os.path.join(prof.outdir, file_name(prof.name, 0, 1)), data)
    return prof.outdir


def _open_path(node) -> List[str]:
    path = []
    while node.parent is not None:
        path.append(node.name)
        node = node.parent
    return path[::-1]


def _header(prof: Profiler, nranks: int, first: int, count: int, index: int, nfiles: int) -> Header:
    return Header(name=prof.name, nranks=nranks, first_rank=first, rank_count=count,
                  file_index=index, file_count=nfiles, metrics=list(prof.metrics))


def union_order(lists: Iterable[Sequence[Callpath]]) -> List[Callpath]:
    """Callpaths of all lists, each once, in order of first appearance.

    Each list is in pre-order, so a prefix always precedes its callpath in
    the union too.
    """
    order: Dict[Callpath, None] = {}
    for paths in lists:
        order.update(dict.fromkeys(paths))
    return list(order)


def encode_fields(events: Sequence[LocalEvent], order: Sequence[Callpath],
                  inconsistent: Sequence[str]) -> List[bytes]:
    """This rank's field for every callpath of ``order`` (empty where it has none)."""
    by_path = {e.path: e for e in events}
    fields = []
    for path in order:
        e = by_path.get(path)
        fields.append(b"" if e is None else
                      encode_rank_field(e.times, e.execs, e.metric_columns(inconsistent)))
    return fields


def build_file(header: Header, ranks: Sequence[Sequence[LocalEvent]],
               executions: Sequence[int]) -> bytes:
    """The file holding ``ranks`` (the events of consecutive ranks, in order)."""
    order = union_order([e.path for e in events] for events in ranks)
    inconsistent = [k for k, c in header.metrics if not c]
    consistent = [k for k, c in header.metrics if c]
    loops: Dict[Callpath, int] = {}
    values: Dict[Callpath, Dict[str, float]] = {}
    for events in ranks:                       # lowest rank first: its values win
        for e in events:
            loops.setdefault(e.path, e.loop)
            merged = values.setdefault(e.path, {})
            for k, v in e.consistent.items():
                merged.setdefault(k, v)
    header.executions = list(executions)
    names, paths = name_table(order)
    return encode_file(header, names, paths, [loops[p] for p in order],
                       [encode_consistent(values[p], consistent) for p in order],
                       [encode_fields(events, order, inconsistent) for events in ranks])


def name_table(order: Sequence[Callpath]) -> Tuple[List[str], List[List[int]]]:
    """Event names in order of first use, and each callpath as name ids."""
    ids: Dict[str, int] = {}
    paths = [[ids.setdefault(n, len(ids)) for n in path] for path in order]
    return list(ids), paths
