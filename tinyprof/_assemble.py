"""One assembler of file contents, used by the flush and the snapshots alike.

A file holds the event maps of consecutive ranks (docs/format.md): the union
of their callpaths in pre-order, one name table, per callpath the merged loop
mode and consistent metrics, and each rank's encoded field. The MPI flush
(``_mpi.py``) builds the same pieces from gathered rows and calls
:func:`encode_file` through :func:`name_table` alike.
"""
from __future__ import annotations

from typing import Callable, Dict, Iterable, List, Sequence, Tuple

from ._eventmap import LocalEvent
from ._format import Header, encode_consistent, encode_file, encode_rank_field

Callpath = Tuple[str, ...]
# (nranks, first rank, rank count, file index, file count) -> the header of that file
HeaderMaker = Callable[[int, int, int, int, int], Header]


def header(name: str, metrics: Sequence[Tuple[str, bool]], run: str, kind: str, number: int,
           nranks: int, first: int, count: int, index: int, nfiles: int) -> Header:
    """The header of file ``index`` of ``nfiles``, holding ``count`` ranks from ``first``,
    of set ``kind`` (flush or snapshot) number ``number`` of run ``run``."""
    h = Header(name=name, nranks=nranks, first_rank=first, rank_count=count,
               file_index=index, file_count=nfiles, metrics=list(metrics))
    h.run, h.set_kind, h.set_number = run, kind, number
    return h


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
