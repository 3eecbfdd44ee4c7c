"""The annotation API: ``Event`` (context manager and decorator) and ``event``.

The hot path is the C core ``tinyprof.annotate._core`` when it was built, else the
pure-Python ``tinyprof.annotate.pyevent``; ``TINYPROF_PURE=1`` forces the latter.
``TINYPROF=0`` replaces both with a no-op that records nothing. Both
implementations follow the same rules (docs/events.md): an exit out of order
never raises, and misuse of an Event object warns once and is ignored.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, TypeVar

from .._env import flag
from . import metrics

F = TypeVar("F", bound=Callable[..., Any])


def enabled() -> bool:
    """Whether profiling is on: ``TINYPROF=0`` (or off/false/no) switches it off."""
    return flag("TINYPROF", True)


ENABLED = enabled()


def _load_impl():
    if not flag("TINYPROF_PURE", False):
        try:
            from . import _core
            return _core
        except ImportError:
            pass
    from . import pyevent
    return pyevent


impl = _load_impl()
impl.set_metric_keys(metrics.keys, metrics.warn_undeclared)


class _NullEvent:
    """What ``Event`` is when ``TINYPROF=0`` without the C core: it records nothing."""

    __slots__ = ()

    def __init__(self, name: str, is_common: bool = True, loop: int = 0, **values: Any) -> None:
        pass

    def __enter__(self) -> _NullEvent:
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
