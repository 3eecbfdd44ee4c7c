"""One assembler of file contents, used by the flush and the snapshots alike.

A file holds the event maps of consecutive ranks (docs/format.md): the union
of their callpaths in pre-order, one name table, per callpath the merged loop
mode and consistent metrics, and each rank's encoded field. The MPI flush
(``_mpi.py``) builds the same pieces from gathered rows and calls
:func:`encode_file` through :func:`name_table` alike.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ._collect import LocalEvent
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


FieldEncoder = Callable[[LocalEvent, Sequence[str]], bytes]


def encode_field(e: LocalEvent, inconsistent: Sequence[str]) -> bytes:
    """The rank field of ``e`` (inconsistent metrics ``inconsistent``)."""
    return encode_rank_field(e.times, e.execs, e.metric_columns(inconsistent))


def build_file(header: Header, ranks: Sequence[Sequence[LocalEvent]],
               executions: Sequence[int], encode: FieldEncoder = encode_field,
               sections: Sequence[Tuple[str, bytes]] = ()) -> bytes:
    """The file holding ``ranks`` (the events of consecutive ranks, in order);
    ``encode`` gives each rank field. With one rank, line ``i`` is its event ``i``.

    Lines are the union of the ranks' callpaths in order of first appearance
    (each rank's list is in pre-order, so parents come first), found by
    (parent line, name): the cost does not grow with the depth.
    """
    inconsistent = [k for k, c in header.metrics if not c]
    consistent = [k for k, c in header.metrics if c]
    lines: Dict[Tuple[int, str], int] = {}      # (parent line, name) -> line
    parents: List[int] = []
    names: List[str] = []
    loops: List[int] = []
    values: List[Dict[str, float]] = []
    rows: List[Dict[int, LocalEvent]] = []      # per rank: line -> its event
    for events in ranks:                        # lowest rank first: its values win
        local: List[int] = []                   # this rank's event i -> its line
        row: Dict[int, LocalEvent] = {}
        for e, parent in zip(events, _parents(events)):
            key = (local[parent] if parent >= 0 else -1, e.path[-1])
            line = lines.get(key)
            if line is None:
                line = lines[key] = len(parents)
                parents.append(key[0])
                names.append(key[1])
                loops.append(e.loop)
                values.append({})
            else:
                loops[line] = merged_loop(loops[line], e.loop)
            for k, v in e.consistent.items():
                values[line].setdefault(k, v)
            local.append(line)
            row[line] = e
        rows.append(row)
    header.executions = list(executions)
    table: Dict[str, int] = {}
    ids = [table.setdefault(name, len(table)) for name in names]
    fields = [[b"" if line not in row else encode(row[line], inconsistent)
               for line in range(len(parents))] for row in rows]
    return encode_file(header, list(table), parents, ids, loops,
                       [encode_consistent(v, consistent) for v in values], fields, sections)


def _parents(events: Sequence[LocalEvent]) -> List[int]:
    """Each event's parent position in ``events`` (-1: a root)."""
    if all(e.parent is not None for e in events):
        return [e.parent for e in events]
    index = {e.path: i for i, e in enumerate(events)}
    return [index.get(e.path[:-1], -1) for e in events]


def merged_loop(current: Optional[int], loop: int) -> int:
    """The loop mode of a callpath that is ``current`` so far (None: not seen)
    when one more rank, going from the lowest, has it in mode ``loop``.

    Ranks that disagree on a callpath's loop mode get the lowest rank's mode,
    except that mode 2 (at most one value per execution) gives way to the
    first mode 0 or 1: the values of such a rank would not fit a mode-2 line.
    """
    return loop if current in (None, 2) else current


def name_table(order: Sequence[Callpath]) -> Tuple[List[str], List[int], List[int]]:
    """Event names in order of first use, and each callpath (in pre-order) as
    its parent's index in ``order`` (-1 for a root) and its last name's id."""
    lines = {path: i for i, path in enumerate(order)}
    table: Dict[str, int] = {}
    ids = [table.setdefault(path[-1], len(table)) for path in order]
    parents = [lines.get(path[:-1], -1) for path in order]
    return list(table), parents, ids
