"""Per (callpath, rank) sums straight from parsed files and MPI rows, below
``Profile``: the pieces that both ``values`` (the converters' aggregates) and
``pop`` (``Profile.pop``) build on, so that neither needs the other; and the call tree's order."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

Callpath = Tuple[str, ...]
PER_SECOND = {"ns": 1e9}
MPI_VALUES = ("time", "bytes", "calls")


def parent_rows(callpaths: Sequence[Callpath]) -> np.ndarray:
    """Index in ``callpaths`` of each callpath's parent, -1 for a root."""
    index = {path: i for i, path in enumerate(callpaths)}
    return np.array([index[p[:-1]] if len(p) > 1 else -1 for p in callpaths], dtype=np.int64)


def tree_order(paths: Sequence[Callpath], key: Optional[Callable[[Callpath], Any]] = None
               ) -> List[Callpath]:
    """``paths`` (parents first) in pre-order, siblings in order of appearance
    (or sorted by ``key``, ties in order of appearance). A path whose parent
    is not in ``paths`` (the top of a subtree) is taken as a root."""
    present = set(paths)
    children: Dict[Callpath, List[Callpath]] = {}
    for path in paths:
        children.setdefault(path[:-1] if path[:-1] in present else (), []).append(path)
    if key is not None:
        children = {parent: sorted(kids, key=key) for parent, kids in children.items()}
    out: List[Callpath] = []
    stack = children.get((), [])[::-1]
    while stack:
        path = stack.pop()
        out.append(path)
        stack.extend(children.get(path, [])[::-1])
    return out


def segments(f, index: Dict[tuple, int]) -> tuple[np.ndarray, ...]:
    """The values of one file cut by (callpath, rank), all lines at once: for
    each (line, rank) with values, its callpath's row (``index``), its global
    rank, and where its values start in the file's arrays and how many there are.
    Values run line after line and, within a line, rank after rank."""
    v = f.values
    line = np.repeat(np.arange(len(v.loops)), np.diff(v.line_slots))
    rank = np.searchsorted(f.exec_base, v.slots, side="right") - 1
    key = line * f.header.rank_count + rank
    starts = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]])) if len(key) else key
    first = np.cumsum(v.counts) - v.counts
    rows = np.array([index[p] for p in f.paths], dtype=np.int64)
    return (rows[line[starts]], rank[starts] + f.header.first_rank, first[starts],
            np.add.reduceat(v.counts, starts) if len(starts) else starts)


def mpi_exclusive(ops: Sequence[tuple], callpaths: Sequence[Callpath], nranks: int
                  ) -> Dict[str, np.ndarray]:
    """Per (callpath, rank), int64: the ``time`` (in the file's unit),
    ``bytes`` and ``calls`` of the MPI calls made while the callpath was
    current, from the rows of ``MpiData.ops``. Calls outside any event
    (callpath ``()``) belong to no callpath and are left out."""
    index = {path: i for i, path in enumerate(callpaths)}
    inside = [r for r in ops if r[0]]
    node = np.array([index[r[0]] for r in inside], dtype=np.int64)
    rank = np.array([r[1] for r in inside], dtype=np.int64)
    out: Dict[str, np.ndarray] = {}
    for name, field in zip(MPI_VALUES, (7, 6, 5)):     # time, bytes, calls in an op row
        out[name] = np.zeros((len(callpaths), nranks), dtype=np.int64)
        np.add.at(out[name], (node, rank), np.array([r[field] for r in inside], dtype=np.int64))
    return out


def inclusive(exclusive: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Per callpath (rows, parents first), its value plus all its descendants'."""
    out = exclusive.copy()
    for i in range(len(parent) - 1, -1, -1):            # children before their parents
        if parent[i] >= 0:
            out[parent[i]] += out[i]
    return out
