"""The event map's declared metric keys, shared with the hot path.

``configure`` fills ``keys`` (declared key -> consistent?) in place; the hot
path (``_core.c`` or ``pyevent.py``) holds that dict (``set_metric_keys``)
and stores the values itself: consistent ones once per callpath, inconsistent
ones in a column of doubles aligned with the node's times (NaN where an
occurrence gave none). A value of an undeclared key makes it call
``warn_undeclared``. The flush copies the map out with ``collect.collect``.
No numpy here: annotating must not load it.
"""
from __future__ import annotations

import os
import sys
import warnings
from types import FrameType
from typing import Any, Dict, Optional, Sequence, Tuple

from ..errors import excerpt

keys: Dict[str, bool] = {}          # declared metric key -> consistent?
_warned: set = set()
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep   # all of tinyprof


def configure(declared: Sequence[Tuple[str, bool]]) -> None:
    keys.clear()
    keys.update(declared)
    _warned.clear()             # a new Profiler warns afresh about undeclared keys


def warn_undeclared(node: Any, key: str) -> None:
    """Warn once per key that ``key`` (given on ``node``'s event) is not declared."""
    if key not in _warned:
        _warned.add(key)
        warnings.warn(f"tinyprof: metric {excerpt(key)} (event {excerpt(node.name)}) is not declared "
                      "in Profiler(selfkeys=...); its values are not recorded",
                      RuntimeWarning, stacklevel=_user_stacklevel())


def _user_stacklevel() -> int:
    # The C core warns straight from __exit__, the pure-Python one via more
    # frames: point the warning at the first frame outside tinyprof.
    frame: Optional[FrameType] = sys._getframe(2)
    level = 2
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    return level
