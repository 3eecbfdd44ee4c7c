"""One assembler of file contents, used by every writer: the serial flush,
the MPI flush's aggregators and the snapshots.

A file holds the event maps of consecutive ranks (docs/format.md): the union
of their callpaths in pre-order, one name table, per callpath the merged loop
mode and consistent metrics, each rank's encoded field, and the sections.
Each rank encodes its :class:`RankPart` (:func:`rank_part`, whole or what
changed since a snapshot) and the file's writer joins the parts
(:func:`assemble`). The MPI flush agrees on the callpaths first and gathers
each rank's fields as one row; its aggregators join the rows
(:func:`assemble_rows`). Both merge by the same rules (:func:`merged_loop`,
:func:`merge_consistent`) and end in the same sections (:func:`merge_mpi`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Protocol, Sequence, Tuple, Union, cast

from ..format import delta_section, mpi_section
from ..format.encoding import Fields, Header, encode_consistent, encode_file, encode_rank_field
from ..format.mpi_section import NONE, Section
from .collect import LocalEvent

Callpath = Tuple[str, ...]


@dataclass(frozen=True)
class SetLabel:
    """What every file of one set says of the run: given by the session, so
    that the writers below it need nothing of it."""

    name: str
    metrics: Tuple[Tuple[str, bool], ...]
    run: str
    kind: str           # "flush" or "snapshot"
    number: int
    meta: bytes = b""   # the meta section's payload (given on rank 0, which writes file 0)

    def header(self, nranks: int, first: int, count: int, index: int, nfiles: int) -> Header:
        """The header of file ``index`` of ``nfiles``, holding ``count`` ranks from ``first``."""
        h = Header(name=self.name, nranks=nranks, first_rank=first, rank_count=count,
                   file_index=index, file_count=nfiles, metrics=list(self.metrics))
        h.run, h.set_kind, h.set_number = self.run, self.kind, self.number
        return h

    def tail(self, index: int) -> List[Tuple[str, bytes]]:
        """The sections after all others in file ``index``: the run's
        ``meta`` section, in file 0 alone."""
        return [("meta", self.meta)] if index == 0 and self.meta else []


# A callpath of a rank, as a rank sends it to its file's writer: (position of
# its parent in the rank's list (-1: a root), last name, loop mode, its
# consistent field).
RankEvent = Tuple[int, str, int, bytes]
# What the fields of a rank held at a base snapshot: per hot-path node, the
# occurrences written for good (all but the newest, which may still change),
# the bytes they take, and the bytes of the rest.
Base = Dict[object, Tuple[int, int, bytes]]


@dataclass
class RankPart:
    """One rank's share of a file: its callpaths (distinct) in pre-order, the
    fields that differ from a base (all non-empty ones when there is none) as
    (position, bytes kept from the base's field, new bytes), and its ``mpi``
    section, whose lines are positions in ``events``."""

    rank: int
    executions: int
    events: List[RankEvent]
    splices: List[Tuple[int, int, bytes]]
    mpi: Optional[Section] = None


def rank_part(events: Sequence[LocalEvent], rank: int, executions: int,
              metrics: Sequence[Tuple[str, bool]], base: Optional[Base] = None,
              mpi: Optional[Section] = None) -> Tuple[RankPart, Base]:
    """The part of ``events`` and what the fields now hold (a new base).

    With ``base`` (a snapshot's previous state, keyed by ``LocalEvent.node``),
    only what changed since: a field grows at its end but for its newest
    occurrence, so its new bytes are encoded from the base's count on.
    """
    consistent = [k for k, c in metrics if c]
    inconsistent = [k for k, c in metrics if not c]
    listed: List[RankEvent] = []
    splices: List[Tuple[int, int, bytes]] = []
    now: Base = {}
    for i, (e, parent) in enumerate(zip(events, _parents(events))):
        listed.append((parent, e.path[-1], e.loop,
                       encode_consistent(e.consistent, consistent) if consistent else b""))
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
    in a ``delta`` section. The parts' ``mpi`` sections are merged into the
    file's; ``sections`` follow as given (their lines are the file's).

    Lines are the union of the ranks' callpaths in order of first appearance
    (each rank's list is in pre-order, so parents come first), found by
    (parent line, name): the cost does not grow with the depth.
    """
    # The first part's callpaths are distinct: its lines are its positions,
    # without a key per callpath (the serial flush has only that part).
    first = parts[0].events if parts else []
    parents: List[int] = [parent for parent, _, _, _ in first]
    names: List[str] = [name for _, name, _, _ in first]
    loops: List[int] = [loop for _, _, loop, _ in first]
    consistent: List[bytes] = [given for _, _, _, given in first]
    where: List[Sequence[int]] = [range(len(first))] if parts else []   # per part: position -> line
    lines: Dict[Tuple[int, str], int] = {}      # (parent line, name) -> line, from the second part
    if len(parts) > 1:
        lines = {key: i for i, key in enumerate(zip(parents, names))}
    for part in parts[1:]:                      # lowest rank first: its values win
        local: List[int] = []
        for parent, name, loop, given in part.events:
            key = (local[parent] if parent >= 0 else -1, name)
            line = lines.get(key)
            if line is None:
                line = lines[key] = len(parents)
                parents.append(key[0])
                names.append(name)
                loops.append(loop)
                consistent.append(given)
            else:
                loops[line] = merged_loop(loops[line], loop)
                consistent[line] = merge_consistent(consistent[line], given)
            local.append(line)
        where.append(local)
    header.executions = [p.executions for p in parts]
    table: Dict[str, int] = {}
    ids = [table.setdefault(name, len(table)) for name in names]
    fields = [[b""] * len(parents) for _ in parts]
    spliced: List[delta_section.Splice] = []
    for r, (part, at) in enumerate(zip(parts, where)):
        for i, keep, text in part.splices:
            if delta:
                spliced.append((at[i], part.rank, keep, text))
            else:
                fields[r][at[i]] = text
    extra: List[Tuple[str, bytes]] = []
    mpi = merge_mpi([moved(part.mpi, at) for part, at in zip(parts, where) if part.mpi])
    if mpi:
        extra.append(("mpi", mpi))
    if delta:
        extra.append(("delta", delta_section.encode(sorted(spliced))))
    return encode_file(header, list(table), parents, ids, loops, consistent, fields,
                       [*extra, *sections])


class Row(Fields, Protocol):
    """One rank's gathered row of an MPI flush (``mpi_flush``): its executions,
    and its consistent field and rank field of each callpath of the file;
    ``encode_file`` takes its rank fields as :class:`Fields` states, after
    every consistent field has been read."""

    executions: int

    def consistent(self, i: int) -> memoryview: ...

    def __getitem__(self, i: int) -> memoryview: ...


def assemble_rows(header: Header, order: Sequence[Callpath], loops: Sequence[int],
                  rows: Sequence[Row], with_consistent: bool, mpi: Sequence[Section] = (),
                  trace: bytes = b"", tail: Sequence[Tuple[str, bytes]] = ()) -> bytes:
    """The file of the gathered ``rows`` (consecutive ranks, lowest first),
    whose fields are already in the lines of ``order`` (pre-order), each line
    in loop mode ``loops[i]``; ``mpi`` are the ranks' sections in those lines,
    ``trace`` the ranks' trace blocks joined in rank order; ``tail`` the
    sections that follow (``SetLabel.tail``)."""
    header.executions = [row.executions for row in rows]
    consistent = [b""] * len(order)
    if with_consistent:
        for i in range(len(order)):
            merged = b""
            for row in rows:
                merged = merge_consistent(merged, row.consistent(i))
            consistent[i] = merged
    names, parents, ids = name_table(order)
    sections = [("mpi", merge_mpi(mpi))] if mpi else []
    if trace:
        sections.append(("trace", trace))
    return encode_file(header, names, parents, ids, loops, consistent, rows, [*sections, *tail])


def merge_consistent(first: bytes, later: Union[bytes, memoryview]) -> bytes:
    """A callpath's consistent field of two ranks, ``first`` the lower one's:
    per metric, the lower rank's value, else the other's (a field lists the
    metrics in header order, empty where the rank has none)."""
    if not later or later == first:
        return first
    if not first:
        return bytes(later)
    merged = first.split(b",")
    for k, token in enumerate(bytes(later).split(b",")):
        if k == len(merged):
            merged.append(token)
        elif not merged[k]:
            merged[k] = token
    return b",".join(merged)


def moved(section: Section, lines: Sequence[int]) -> Section:
    """``section`` of one rank with its lines (positions in the rank's events)
    moved to the file's: position ``i`` becomes ``lines[i]``."""
    move = [*lines, NONE]           # index NONE (-1): outside any event, kept
    return Section([replace(c, created=move[c.created]) for c in section.comms],
                   [(r[0], move[r[1]], *r[2:]) for r in section.ops],
                   [(r[0], move[r[1]], *r[2:]) for r in section.peers],
                   [(r[0], move[r[1]], *r[2:]) for r in section.transport], section.ucx)


def merge_mpi(sections: Sequence[Section]) -> bytes:
    """The file's ``mpi`` payload from its ranks' sections (lowest rank first,
    in the file's lines), b"" when there is none."""
    return mpi_section.encode_section(mpi_section.merge(sections)) if sections else b""


def build_file(header: Header, ranks: Sequence[Sequence[LocalEvent]],
               executions: Sequence[int], sections: Sequence[Tuple[str, bytes]] = (),
               mpi: Sequence[Optional[Section]] = ()) -> bytes:
    """The whole file holding ``ranks`` (the events of consecutive ranks, in
    order), with each rank's ``mpi`` section if given. With one rank, line
    ``i`` is its event ``i``."""
    sections_of = [*mpi, *[None] * (len(ranks) - len(mpi))]
    parts = [rank_part(events, header.first_rank + r, n, header.metrics, mpi=s)[0]
             for r, (events, n, s) in enumerate(zip(ranks, executions, sections_of))]
    return assemble(header, parts, sections=sections)


def _parents(events: Sequence[LocalEvent]) -> List[int]:
    """Each event's parent position in ``events`` (-1: a root)."""
    parents = [e.parent for e in events]
    if None not in parents:
        return cast(List[int], parents)
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
