"""This rank's block of the ``trace`` section (docs/trace.md), from the
records of the annotation core, at flush time.

Nothing here runs on the hot path: the core only appends fixed-size
records; mapping nodes to the file's lines, sorting and encoding happen here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Tuple

import numpy as np

from ..format import trace_section
from ..format.trace_section import NONE, Clock

if TYPE_CHECKING:
    from .capture import CallTrace


@dataclass(frozen=True)
class Records:
    """What a rank traced, read before its event map is copied (so that every
    node the records name has a line): ``core`` is the core's
    ``trace_records()``, ``mpi`` the MPI calls traced (None without capture)."""

    rank: int
    clock: Clock
    core: Tuple[bytes, int]
    mpi: Optional[CallTrace]


def block(records: Records, lines: Dict[int, int]) -> bytes:
    """The encoded block of ``records``; ``lines`` maps node ids to the file's
    event lines. Occurrences of nodes without a line (made after the event
    map was copied) are left for the next flush; calls outside every event
    (node 0) have no line."""
    rank, clock, core, mpi = records.rank, records.clock, records.core, records.mpi
    ids = np.fromiter(lines.keys(), np.int64, len(lines))
    lookup = np.full(int(np.max(ids, initial=0)) + 1, NONE, np.int64)
    lookup[ids] = np.fromiter(lines.values(), np.int64, len(lines))

    def line_of(nodes: np.ndarray) -> np.ndarray:
        known = (nodes >= 0) & (nodes < len(lookup))
        return np.where(known, lookup[np.where(known, nodes, 0)], NONE)

    events = _sorted_events(np.frombuffer(core[0], np.int64).reshape(-1, 4), line_of)
    calls, ops, endpoints, names, dropped = np.zeros((0, 7), np.int64), [], \
        np.zeros((0, 6), np.int64), [], 0
    if mpi is not None:
        c = mpi.calls
        # communicators by name (fallback names may repeat across records)
        position = {name: i for i, name in enumerate(dict.fromkeys(mpi.comms.values()))}
        names = list(position)

        def comm_of(records: np.ndarray) -> np.ndarray:
            return np.array([position[mpi.comms[i]] if i in mpi.comms else NONE
                             for i in records.tolist()], np.int64).reshape(-1)
        calls = np.column_stack([c[:, 0], line_of(c[:, 1]), c[:, 2], c[:, 3], comm_of(c[:, 5]),
                                 c[:, 6], c[:, 7]])
        ops = [mpi.ops[op] for op in c[:, 4].tolist()]
        endpoints = mpi.endpoints.copy()
        endpoints[:, 5] = comm_of(endpoints[:, 5])
        endpoints, dropped = endpoints[endpoints[:, 5] != NONE], mpi.dropped
    b = trace_section.make_block(rank, clock, events, calls, ops, endpoints, names,
                                 (core[1], dropped), events_sorted=True)
    return trace_section.encode([b])


def _sorted_events(rec: np.ndarray, line_of: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """The core's records ``(node, tid, start, dur)`` of nodes with a line as
    rows ``(tid, line, start, dur)`` in the block's order (trace_section.
    make_block): sorted from the core's buffer into the one copy, the only
    array per occurrence beside the buffer and the sort's order."""
    line = line_of(rec[:, 0])
    kept = np.flatnonzero(line != NONE)
    if len(kept) == len(rec):
        order = np.lexsort((-rec[:, 3], rec[:, 1], rec[:, 2]))
    else:
        order = kept[np.lexsort((-rec[kept, 3], rec[kept, 1], rec[kept, 2]))]
    del kept
    events = np.empty((len(order), 4), np.int64)
    events[:, 1] = line[order]
    del line
    for column, source in ((0, 1), (2, 2), (3, 3)):
        events[:, column] = rec[order, source]
    return events


def clock_of(syncs: List[Tuple[int, int, int]]) -> Clock:
    """The block's clock line from the first and the latest synchronisation
    ``(local, offset, error)``; the error is the larger bound of the two."""
    (l0, o0, e0), (l1, o1, e1) = syncs[0], syncs[-1]
    return l0, o0, l1, o1, max(e0, e1)
