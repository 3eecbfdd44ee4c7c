"""The event map copied out for a flush or snapshot: one LocalEvent per callpath.

Numpy is loaded here, at the first flush, not while annotating (metrics.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

_NAN = float("nan")


@dataclass
class LocalEvent:
    """One callpath of this process, copied out of the hot path's node."""

    path: Tuple[str, ...]
    loop: int
    common: bool
    times: np.ndarray                  # int64
    execs: np.ndarray                  # int64 (execution, first index) pairs
    consistent: Dict[str, float]
    metrics: Dict[str, np.ndarray]     # inconsistent key -> float64, aligned with times
    # Position of the parent in the list this event came in (-1: a root):
    # set by collect(); None in hand-built lists, where the paths tell.
    parent: Optional[int] = None
    node: Any = None                   # the hot path's node: a key hashed in O(1)

    def metric_columns(self, keys: Sequence[str]) -> List[Optional[np.ndarray]]:
        return [self.metrics.get(k) for k in keys]


def collect(root) -> List[LocalEvent]:
    """Copy the call tree under ``root`` into a list, in pre-order.

    Nodes of events still open appear too (with no values), so every prefix of
    a callpath is present.
    """
    out: List[LocalEvent] = []
    # (path of the parent, its position in out, node)
    stack: List[Tuple[Tuple[str, ...], int, Any]] = [
        ((), -1, child) for child in reversed(list(root.children.values()))]
    while stack:
        prefix, parent, node = stack.pop()
        path = prefix + (node.name,)
        raw_times, raw_execs = node.data()
        times = np.frombuffer(raw_times, dtype=np.int64)
        execs = _clean_execs(np.frombuffer(raw_execs, dtype=np.int64), len(times))
        metrics = {}
        for key, column in list((node.metrics or {}).items()):
            col = np.full(len(times), _NAN)
            vals = np.frombuffer(bytes(column), dtype=np.float64)[:len(times)]   # a copy
            col[:len(vals)] = vals
            metrics[key] = col
        here = len(out)
        out.append(LocalEvent(path, node.loop, node.common, times, execs,
                              dict(node.consistent or {}), metrics, parent, node))
        if node.children:
            stack.extend((path, here, child) for child in reversed(list(node.children.values())))
    return out


def _clean_execs(execs: np.ndarray, ntimes: int) -> np.ndarray:
    if len(execs) == 2 and execs[1] < ntimes:      # one execution: nothing to clean
        return execs
    # Another thread may record between the copies of times and boundaries, and
    # two threads racing on a node's first record of an execution (pure-Python
    # path only) can append the same boundary twice: keep what the times cover.
    # A snapshot thread may copy the pure-Python path's pair half-appended.
    pairs = execs[:len(execs) // 2 * 2].reshape(-1, 2)
    pairs = pairs[pairs[:, 1] < ntimes]
    if len(pairs) > 1 and (pairs[1:, 0] <= pairs[:-1, 0]).any():
        keep = np.concatenate([[True], pairs[1:, 0] > np.maximum.accumulate(pairs[:-1, 0])])
        pairs = pairs[keep]
    return pairs.reshape(-1)
