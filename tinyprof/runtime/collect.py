"""The event map copied out for a flush or snapshot: one LocalEvent per callpath.

Numpy is loaded at the first flush (collect), not when a session starts
(python -m tinyprof starts fast) nor while annotating (metrics.py).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

if TYPE_CHECKING:
    import numpy as np

_NAN = float("nan")
# Shared by the many callpaths without metrics, and never changed (a
# MappingProxyType would not pickle, and events are pickled to other ranks).
_NONE: Mapping[str, Any] = {}


class LocalEvent:
    """One callpath of this process, copied out of the hot path's node.

    A flush holds one per callpath (300,000 in a big run), so it has slots,
    shares one empty mapping for absent metrics, and keeps ``times`` and
    ``execs`` as the bytes the core gave until they are read (an array
    object costs more than the one value most callpaths hold).
    """

    __slots__ = ("path", "loop", "common", "_times", "_execs", "consistent", "metrics",
                 "parent", "node")

    def __init__(self, path: Tuple[str, ...], loop: int, common: bool,
                 times: Union[np.ndarray, bytes], execs: Union[np.ndarray, bytes],
                 consistent: Mapping[str, float], metrics: Mapping[str, np.ndarray],
                 parent: Optional[int] = None, node: Any = None) -> None:
        self.path = path
        self.loop = loop
        self.common = common
        self._times = times                # int64 values, or their bytes
        self._execs = execs                # int64 (execution, first index) pairs, or their bytes
        self.consistent = consistent
        self.metrics = metrics             # inconsistent key -> float64, aligned with times
        # Position of the parent in the list this event came in (-1: a root):
        # set by collect(); None in hand-built lists, where the paths tell.
        self.parent = parent
        self.node = node                   # the hot path's node: a key hashed in O(1)

    @property
    def times(self) -> np.ndarray:
        return _array(self._times)

    @property
    def execs(self) -> np.ndarray:
        return _array(self._execs)

    def metric_columns(self, keys: Sequence[str]) -> List[Optional[np.ndarray]]:
        return [self.metrics.get(k) for k in keys]


def _array(values: Union[np.ndarray, bytes]) -> np.ndarray:
    import numpy as np

    return np.frombuffer(values, np.int64) if isinstance(values, bytes) else values


def collect(root) -> List[LocalEvent]:
    """Copy the call tree under ``root`` into a list, in pre-order.

    Nodes of events still open appear too (with no values), so every prefix of
    a callpath is present.
    """
    import numpy as np

    out: List[LocalEvent] = []
    # (path of the parent, its position in out, node)
    stack: List[Tuple[Tuple[str, ...], int, Any]] = [
        ((), -1, child) for child in reversed(list(root.children.values()))]
    while stack:
        prefix, parent, node = stack.pop()
        path = prefix + (node.name,)
        raw_times, raw_execs = node.data()
        ntimes = len(raw_times) // 8
        execs = _clean_execs(raw_execs, ntimes)
        metrics: Mapping[str, np.ndarray] = _NONE
        if node.metrics:
            metrics = {}
            for key, column in list(node.metrics.items()):
                col = np.full(ntimes, _NAN)
                vals = np.frombuffer(bytes(column), dtype=np.float64)[:ntimes]   # a copy
                col[:len(vals)] = vals
                metrics[key] = col
        here = len(out)
        out.append(LocalEvent(path, node.loop, node.common, raw_times, execs,
                              dict(node.consistent) if node.consistent else _NONE, metrics,
                              parent, node))
        if node.children:
            stack.extend((path, here, child) for child in reversed(list(node.children.values())))
    return out


def _clean_execs(raw: bytes, ntimes: int) -> Union[np.ndarray, bytes]:
    import numpy as np

    execs = np.frombuffer(raw, dtype=np.int64)
    if len(execs) == 2 and execs[1] < ntimes:      # one execution: nothing to clean
        return raw
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


def node_lines(events: Sequence[LocalEvent]) -> Dict[int, int]:
    """Node id -> position in ``events``, sites' ids included: the lines of
    the ``mpi`` section and of the trace."""
    out: Dict[int, int] = {}
    for i, e in enumerate(events):
        for ident in getattr(e.node, "ids", (e.node.id,)) if e.node is not None else ():
            out[ident] = i
    return out
