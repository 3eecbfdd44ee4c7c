"""Hand-made traces whose critical path and wait states are known exactly
(tests/analysis/test_trace_analysis.py, tests/analysis/test_pop.py)."""
from __future__ import annotations

from typing import List, Sequence, Tuple

import numpy as np

from tinyprof.analysis import trace as _trace
from tinyprof.format.trace_section import RECV, SEND


def make_trace(nranks: int, events: Sequence[tuple], calls: Sequence[tuple]) -> _trace.Trace:
    """events: (rank, callpath, start, end); calls: (rank, callpath, op, start,
    end, endpoints) with endpoints [("s"|"r", peer, tag, bytes)], or (..., root)
    for a rooted collective; all on COMM_WORLD, times in ns."""
    paths: List[Tuple[str, ...]] = []
    for e in events:
        for i in range(1, len(e[1]) + 1):
            if e[1][:i] not in paths:
                paths.append(e[1][:i])
    ops: List[str] = []
    ev = sorted((r, MAIN_TID, paths.index(p), s, t) for r, p, s, t in events)
    rows, eps = [], []
    for i, (r, p, op, s, t, *rest) in enumerate(sorted(calls, key=lambda c: (c[0], c[3]))):
        if op not in ops:
            ops.append(op)
        ends, root = (rest[0], -1) if rest and isinstance(rest[0], list) else \
            ([], rest[0] if rest else -1)
        rows.append((r, MAIN_TID, paths.index(p), s, t, ops.index(op), 0, 8, root))
        eps += [(i, SEND if k == "s" else RECV, peer, tag, n, 0, r) for k, peer, tag, n in ends]
    trace = _trace.Trace(nranks, "ns", paths, ops, ["COMM_WORLD"], 0,
                         dict(zip(_trace.EV_COLUMNS, np.array(ev, np.int64).reshape(-1, 5).T)),
                         dict(zip(_trace.CALL_COLUMNS, np.array(rows, np.int64).reshape(-1, 9).T)),
                         {}, np.zeros((nranks, 2), np.int64))
    trace.msgs = _trace.match(trace, np.array(eps, np.int64).reshape(-1, 7))
    return trace


MAIN_TID = 7            # the OS tid of every rank's main thread here
