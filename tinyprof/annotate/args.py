"""What the two hot paths share: ``Event`` argument checks and misuse warnings.

The C core (``_core.c``) builds an Event itself only in the cases it checks
trivially (an exact ``str`` name, ``loop`` an exact int 0/1/2, ``is_common`` an
exact bool, no metric values) and calls ``event_args`` for everything else; the
pure-Python twin (``pyevent.py``) always calls it. So both accept, normalise
and reject the same arguments with the same messages.
"""
from __future__ import annotations

import warnings
from typing import Any, Dict, Optional, Set, Tuple

from ..errors import excerpt

#: The misuse kinds warned about so far in this process (tests clear it).
warned: Set[str] = set()

_MISUSE = {
    "enter": "entered again while it is open",
    "exit": "exited without being entered",
    "exit_twice": "exited twice",
}


def event_args(name: Any, is_common: Any = True, loop: Any = 0,
               values: Optional[Dict[str, Any]] = None
               ) -> Tuple[str, bool, int, Optional[Dict[str, float]]]:
    """Check and normalise ``Event(name, is_common, loop, **values)``.

    Returns ``(name, is_common, loop, values)`` with ``is_common`` a bool,
    ``loop`` the int 0, 1 or 2 (``loop=True`` is 1) and ``values`` a dict of
    floats, or None when there are none. Raises TypeError or ValueError: these
    are mistakes in the program's code, reported where the Event is made.
    """
    if not isinstance(name, str):
        raise TypeError(f"tinyprof.Event name must be a str, not {type(name).__name__}")
    for mode in (0, 1, 2):
        if loop == mode:
            break
    else:
        raise ValueError(f"tinyprof.Event {excerpt(name)}: loop must be 0, 1 or 2, not {loop!r}")
    return name, bool(is_common), mode, _metric_values(name, values)


def _metric_values(name: str, values: Optional[Dict[str, Any]]) -> Optional[Dict[str, float]]:
    """Metric values become floats once, at construction, not on every exit."""
    if not values:
        return None
    try:
        return {k: float(v) for k, v in values.items()}
    except (TypeError, ValueError):
        bad = {k: v for k, v in values.items() if not isinstance(v, (int, float))}
        raise TypeError(f"tinyprof.Event {excerpt(name)}: metric values must be numbers, "
                        f"got {bad!r}") from None


def warn_misuse(kind: str, name: str, stacklevel: int) -> None:
    """Warn, once per ``kind`` in a process, that one Event object was misused.

    ``kind`` is ``"enter"`` (entered again while open), ``"exit"`` (exited
    without being entered) or ``"exit_twice"``. The caller ignores the call;
    ``stacklevel`` points the warning at the application's line.
    """
    if kind in warned:
        return
    warned.add(kind)
    warnings.warn(f"tinyprof: event {excerpt(name)} {_MISUSE[kind]}; ignored (warned once)",
                  RuntimeWarning, stacklevel=stacklevel + 1)
