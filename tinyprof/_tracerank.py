"""This rank's block of the ``trace`` section (docs/trace.md), from the
records of the annotation core and of the MPI library, at flush time.

Nothing here runs on the hot path: the core and the library only append
fixed-size records; mapping nodes to the file's lines, sorting and encoding
happen here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import _tracesection
from ._tracesection import NONE, Clock


@dataclass
class CallRecords:
    """The MPI library's trace records (``Capture.trace_calls``)."""

    records: np.ndarray         # (n, 9) int64: tid, node, start, end, op, comm, bytes, root, nep
    endpoints: np.ndarray       # (k, 4) int64: kind, peer, tag, bytes; by record, in order
    dropped: int
    ops: Sequence[str]          # op code -> name
    comms: Sequence[str]        # communicator index -> name


def block(rank: int, clock: Clock, core: Tuple[bytes, int], calls: Optional[CallRecords],
          lines: Dict[int, int]) -> bytes:
    """The encoded block: ``core`` is the core's ``trace_records()``, ``calls``
    the library's records (None without MPI capture), ``lines`` maps node ids
    to this flush's event lines. Occurrences of nodes without a line (made
    after the event map was copied) are left for the next flush."""
    ids = np.fromiter(lines.keys(), np.int64, len(lines))
    lookup = np.full(int(ids.max(initial=0)) + 1, NONE, np.int64)
    lookup[ids] = np.fromiter(lines.values(), np.int64, len(lines))

    def line_of(nodes: np.ndarray) -> np.ndarray:
        known = (nodes >= 0) & (nodes < len(lookup))
        return np.where(known, lookup[np.where(known, nodes, 0)], NONE)

    rec = np.frombuffer(core[0], np.int64).reshape(-1, 4)
    line = line_of(rec[:, 0])
    keep = line != NONE
    events = np.column_stack([rec[keep, 1], line[keep], rec[keep, 2], rec[keep, 3]])
    dropped = (core[1], 0)
    call_rows, ops, eps, comms = np.zeros((0, 7), np.int64), [], np.zeros((0, 5), np.int64), []
    if calls is not None and len(calls.records):
        r = calls.records
        call_rows = np.column_stack([r[:, 0], line_of(r[:, 1]), r[:, 2], r[:, 3] - r[:, 2],
                                     r[:, 5], r[:, 6], r[:, 7]])
        ops = [calls.ops[op] for op in r[:, 4].tolist()]
        eps = np.column_stack([np.repeat(np.arange(len(r)), r[:, 8]), calls.endpoints])
        comms = list(calls.comms)
        dropped = (core[1], calls.dropped)
    elif calls is not None:
        dropped = (core[1], calls.dropped)
    b = _tracesection.make_block(rank, clock, events, call_rows, ops, eps, comms, dropped)
    return _tracesection.encode([b])


def clock_of(syncs: List[Tuple[int, int, int]]) -> Clock:
    """The block's clock line from the first and the latest synchronisation
    ``(local, offset, error)``; the error is the larger bound of the two."""
    (l0, o0, e0), (l1, o1, e1) = syncs[0], syncs[-1]
    return l0, o0, l1, o1, max(e0, e1)
