"""The event map's metric bookkeeping on record.

The hot path (``_core.c`` or ``_pyevent.py``) keeps one node per callpath with
its times in an int64 buffer. Custom metrics are rarer, so they are handled
here, in Python: consistent ones once per callpath, inconsistent ones in a
array('d') aligned with the times (NaN where an occurrence gave none). The
flush copies the map out with ``_collect.collect``. No numpy here: annotating
must not load it.
"""
from __future__ import annotations

import os
import sys
import warnings
from array import array
from typing import Dict, Sequence, Tuple

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
