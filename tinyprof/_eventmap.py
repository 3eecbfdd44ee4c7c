"""The event map: metric bookkeeping on record, and the snapshot the flush reads.

The hot path (``_core.c`` or ``_pyevent.py``) keeps one node per callpath with
its times in an int64 buffer. Custom metrics are rarer, so they are handled
here, in Python: consistent ones once per callpath, inconsistent ones in a
float64 array aligned with the times (NaN where an occurrence gave none).
"""
from __future__ import annotations

import os
import sys
import warnings
from array import array
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

_NAN = float("nan")
_keys: Dict[str, bool] = {}        # declared metric key -> consistent?
_warned: set = set()
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def configure(keys: Sequence[Tuple[str, bool]]) -> None:
    _keys.clear()
    _keys.update(keys)
    _warned.clear()             # a new Profiler warns afresh about undeclared keys


def record_metrics(node, values: Dict[str, float]) -> None:
    """Store the metric values of the occurrence just recorded on ``node``."""
    index = node.count - 1
    for key, value in values.items():
        consistent = _keys.get(key)
        if consistent is None:
            if key not in _warned:
                _warned.add(key)
                warnings.warn(f"tinyprof: metric {key!r} (event {node.name!r}) is not declared "
                              "in Profiler(selfkeys=...); its values are not recorded",
                              RuntimeWarning, stacklevel=_user_stacklevel())
        elif consistent:
            if node.consistent is None:
                node.consistent = {}
            node.consistent.setdefault(key, value)
        elif value == value:        # NaN means "not given": it must not wipe a loop-2 sum
            if node.metrics is None:
                node.metrics = {}
            column = node.metrics.get(key)
            if column is None:
                column = node.metrics[key] = array("d")
            if len(column) <= index:
                column.extend([_NAN] * (index + 1 - len(column)))
                column[index] = value
            elif node.loop == 2 and column[index] == column[index]:
                column[index] += value      # loop 2 sums per execution
            else:
                column[index] = value


def _user_stacklevel() -> int:
    # The C core calls the hook straight from __exit__, the pure-Python one via
    # two more frames: point the warning at the first frame outside tinyprof.
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    return level


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
    stack = [((), -1, child) for child in reversed(list(root.children.values()))]
    while stack:
        prefix, parent, node = stack.pop()
        path = prefix + (node.name,)
        raw_times, raw_execs = node.data()
        times = np.frombuffer(raw_times, dtype=np.int64)
        execs = _clean_execs(np.frombuffer(raw_execs, dtype=np.int64), len(times))
        metrics = {}
        for key, column in list((node.metrics or {}).items()):
            col = np.full(len(times), _NAN)
            vals = np.frombuffer(column.tobytes(), dtype=np.float64)[:len(times)]
            col[:len(vals)] = vals
            metrics[key] = col
        here = len(out)
        out.append(LocalEvent(path, node.loop, node.common, times, execs,
                              dict(node.consistent or {}), metrics, parent, node))
        stack.extend((path, here, child) for child in reversed(list(node.children.values())))
    return out


def _clean_execs(execs: np.ndarray, ntimes: int) -> np.ndarray:
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
