"""The annotation API: ``Event`` (context manager and decorator) and ``event``.

The hot path is the C core ``tinyprof._core`` when it was built, else the
pure-Python ``tinyprof._pyevent``; ``TINYPROF_PURE=1`` forces the latter.
``TINYPROF=0`` replaces both with a no-op that records nothing. Both
implementations follow the same rules (docs/events.md): an exit out of order
never raises, and misuse of an Event object warns once and is ignored.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Optional, TypeVar

from . import _eventmap, _pyevent
from ._settings import enabled

F = TypeVar("F", bound=Callable[..., Any])

ENABLED = enabled()


def _load_impl():
    if os.environ.get("TINYPROF_PURE", "") not in ("", "0"):
        return _pyevent
    try:
        from . import _core
    except ImportError:
        return _pyevent
    return _core


impl = _load_impl()
impl.set_metric_hook(_eventmap.record_metrics)


class _NullEvent:
    """What ``Event`` is when ``TINYPROF=0`` without the C core: it records nothing."""

    __slots__ = ()

    def __init__(self, name: str, is_common: bool = True, loop: int = 0, **values: Any) -> None:
        pass

    def __enter__(self) -> "_NullEvent":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def __call__(self, func: F) -> F:
        return func


# Switched off, the C core's NullEvent (one shared object, no argument parsing)
# costs about a third of the pure-Python no-op.
Event = impl.Event if ENABLED else getattr(impl, "NullEvent", _NullEvent)


def event(func: Optional[F] = None, **options: Any):
    """Decorator profiling a function as an event named after it.

    ``@tinyprof.event`` or ``@tinyprof.event(loop=1, is_common=False, ...)``.
    """
    if func is None:
        return lambda f: event(f, **options)
    return Event(func.__qualname__, **options)(func)
