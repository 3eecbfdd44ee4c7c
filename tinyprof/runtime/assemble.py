"""One assembler of file contents, used by the flush and the snapshots alike.

A file holds the event maps of consecutive ranks (docs/format.md): the union
of their callpaths in pre-order, one name table, per callpath the merged loop
mode and consistent metrics, and each rank's encoded field. Each rank encodes
its :class:`RankPart` (:func:`rank_part`, whole or what changed since a
snapshot) and the file's writer joins the parts (:func:`assemble`). The MPI
flush (``_mpi.py``) builds the same pieces from gathered rows and calls
:func:`encode_file` through :func:`name_table` alike.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..format import delta as _deltasection
from ..format import mpi_section
from ..format.encoding import Header, encode_consistent, encode_file, encode_rank_field
from ..format.mpi_section import NONE
from .collect import LocalEvent

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


# A callpath of a rank, as a rank sends it to its file's writer: (position of
# its parent in the rank's list (-1: a root), last name, loop mode, consistent metrics).
RankEvent = Tuple[int, str, int, Dict[str, float]]
# What the fields of a rank held at a base snapshot: per hot-path node, the
# occurrences written for good (all but the newest, which may still change),
# the bytes they take, and the bytes of the rest.
Base = Dict[object, Tuple[int, int, bytes]]


@dataclass
class RankPart:
    """One rank's share of a file: its callpaths in pre-order, the fields that
    differ from a base (all non-empty ones when there is none) as (position,
    bytes kept from the base's field, new bytes), and its ``mpi`` payload,
    whose lines are positions in ``events``."""

    rank: int
    executions: int
    events: List[RankEvent]
    splices: List[Tuple[int, int, bytes]]
    mpi: bytes = b""


def rank_part(events: Sequence[LocalEvent], rank: int, executions: int,
              inconsistent: Sequence[str], base: Optional[Base] = None,
              mpi: bytes = b"") -> Tuple[RankPart, Base]:
    """The part of ``events`` and what the fields now hold (a new base).

    With ``base`` (a snapshot's previous state, keyed by ``LocalEvent.node``),
    only what changed since: a field grows at its end but for its newest
    occurrence, so its new bytes are encoded from the base's count on.
    """
    listed: List[RankEvent] = []
    splices: List[Tuple[int, int, bytes]] = []
    now: Base = {}
    for i, (e, parent) in enumerate(zip(events, _parents(events))):
        listed.append((parent, e.path[-1], e.loop, e.consistent))
        columns = e.metric_columns(inconsistent)
        if base is None:
            text = encode_rank_field(e.times, e.execs, columns)
            if text:
                splices.append((i, 0, text))
            continue
        count, length, tail = base.get(e.node, (0, 0, b""))
        stable = max(len(e.times) - 1, count)
        done = encode_rank_field(e.times[:stable], e.execs,
                                 [None if c is None else c[:stable] for c in columns], count)
        rest = encode_rank_field(e.times, e.execs, columns, stable)
        now[e.node] = (stable, length + len(done), rest)
        if done or rest != tail:
            splices.append((i, length, done + rest))
    return RankPart(rank, executions, listed, splices, mpi), now


def assemble(header: Header, parts: Sequence[RankPart], delta: bool = False,
             sections: Sequence[Tuple[str, bytes]] = ()) -> bytes:
    """The file of ``parts`` (consecutive ranks, lowest first): the rank fields
    in the event lines, or with ``delta`` (a file ``over`` a base snapshot)
    in a ``delta`` section. The parts' ``mpi`` payloads are merged into the
    file's; ``sections`` follow as given (their lines are the file's).

    Lines are the union of the ranks' callpaths in order of first appearance
    (each rank's list is in pre-order, so parents come first), found by
    (parent line, name): the cost does not grow with the depth.
    """
    lines: Dict[Tuple[int, str], int] = {}      # (parent line, name) -> line
    parents: List[int] = []
    names: List[str] = []
    loops: List[int] = []
    values: List[Dict[str, float]] = []
    where: List[List[int]] = []                 # per part: its position -> line
    for part in parts:                          # lowest rank first: its values win
        local: List[int] = []
        for parent, name, loop, consistent in part.events:
            key = (local[parent] if parent >= 0 else -1, name)
            line = lines.get(key)
            if line is None:
                line = lines[key] = len(parents)
                parents.append(key[0])
                names.append(name)
                loops.append(loop)
                values.append({})
            else:
                loops[line] = merged_loop(loops[line], loop)
            for k, v in consistent.items():
                values[line].setdefault(k, v)
            local.append(line)
        where.append(local)
    header.executions = [p.executions for p in parts]
    table: Dict[str, int] = {}
    ids = [table.setdefault(name, len(table)) for name in names]
    fields = [[b""] * len(parents) for _ in parts]
    spliced: List[_deltasection.Splice] = []
    for r, (part, local) in enumerate(zip(parts, where)):
        for i, keep, text in part.splices:
            if delta:
                spliced.append((local[i], part.rank, keep, text))
            else:
                fields[r][local[i]] = text
    extra: List[Tuple[str, bytes]] = []
    mpi = _merged_mpi(header, parts, where, len(parents))
    if mpi:
        extra.append(("mpi", mpi))
    if delta:
        extra.append(("delta", _deltasection.encode(sorted(spliced))))
    consistent = [k for k, c in header.metrics if c]
    return encode_file(header, list(table), parents, ids, loops,
                       [encode_consistent(v, consistent) for v in values], fields,
                       [*extra, *sections])


def _merged_mpi(header: Header, parts: Sequence[RankPart], where: Sequence[List[int]],
                nlines: int) -> bytes:
    """The file's ``mpi`` payload from its parts', their lines moved to the file's."""
    sections = []
    for part, local in zip(parts, where):
        if not part.mpi:
            continue
        s = mpi_section.parse(part.mpi, "rank payload", 1, len(part.events), part.rank, 1,
                              header.nranks)
        move = local + [NONE]           # index NONE (-1): outside any event, kept
        s.comms = [replace(c, created=move[c.created]) for c in s.comms]
        s.ops = [(r[0], move[r[1]], *r[2:]) for r in s.ops]
        s.peers = [(r[0], move[r[1]], *r[2:]) for r in s.peers]
        sections.append(s)
    if not sections:
        return b""
    merged = mpi_section.merge(sections)
    return mpi_section.encode_section(merged)


def build_file(header: Header, ranks: Sequence[Sequence[LocalEvent]],
               executions: Sequence[int], sections: Sequence[Tuple[str, bytes]] = ()) -> bytes:
    """The whole file holding ``ranks`` (the events of consecutive ranks, in
    order). With one rank, line ``i`` is its event ``i``."""
    inconsistent = [k for k, c in header.metrics if not c]
    parts = [rank_part(events, header.first_rank + r, n, inconsistent)[0]
             for r, (events, n) in enumerate(zip(ranks, executions))]
    return assemble(header, parts, sections=sections)


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
