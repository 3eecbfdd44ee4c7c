"""Types of tinyprof.annotate._core, the C annotation hot path (built from _core.c).

Same interface as the pure-Python tinyprof._pyevent; semantics in docs/events.md.
"""
from typing import Any, Callable, Dict, Optional, Tuple, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])

_fast_context: bool
"""True when the ContextVar fast path passed its import-time layout check."""


class Node:
    """One callpath of the event map: its values and its children."""

    @property
    def name(self) -> str: ...
    @property
    def parent(self) -> Optional[Node]: ...
    @property
    def children(self) -> Dict[str, Node]: ...
    @property
    def depth(self) -> int: ...
    @property
    def id(self) -> int:
        """0 for the root, unique in the process otherwise (MPI attribution)."""
    @property
    def loop(self) -> int: ...
    @property
    def common(self) -> bool: ...
    @property
    def last_exec(self) -> int: ...
    @property
    def count(self) -> int: ...
    consistent: Optional[Dict[str, float]]
    metrics: Optional[Dict[str, Any]]

    def __init__(self, name: str, parent: Optional[Node], loop: int = ...,
                 common: bool = ...) -> None: ...
    def data(self) -> Tuple[bytes, bytes]:
        """``(times, execs)`` as bytes of native int64, for the flush."""


class Event:
    """A profiled region: ``with Event("solve"):`` or ``@Event("solve")``."""

    @property
    def name(self) -> str: ...
    @property
    def is_common(self) -> bool: ...
    @property
    def loop(self) -> int: ...
    @property
    def values(self) -> Optional[Dict[str, float]]: ...

    def __init__(self, name: str, is_common: bool = True, loop: int = 0,
                 **values: float) -> None: ...
    def __enter__(self) -> Event: ...
    def __exit__(self, *exc: object) -> None: ...
    def __call__(self, func: _F) -> _F: ...


class NullEvent:
    """What Event is when TINYPROF=0: one shared object that records nothing."""

    def __init__(self, name: str, is_common: bool = True, loop: int = 0,
                 **values: float) -> None: ...
    def __enter__(self) -> NullEvent: ...
    def __exit__(self, *exc: object) -> None: ...
    def __call__(self, func: _F) -> _F: ...


def root() -> Node:
    """The root Node of the event map."""
def current() -> Node:
    """The innermost open Node in this context."""
def executions() -> int:
    """Number of executions started."""
def reset() -> None:
    """Forget every recorded value (tests, and a fresh profile)."""
def set_clock(clock: Optional[Callable[[], int]]) -> None:
    """Replace the nanosecond clock (tests inject deterministic timings); None restores it."""
def _source_address() -> int:
    """Address of ``int32_t source(void)``: the id of the calling thread's current node."""
def set_metric_keys(keys: Dict[str, bool], warn: Callable[[Node, str], None]) -> None:
    """The declared metric keys (a dict, read as it changes: key -> consistent?)
    and ``warn(node, key)``, called for a value of an undeclared key."""
def trace(limit: int) -> None:
    """Keep the start of up to ``limit`` occurrences (trace mode); 0 turns it off."""
def trace_records() -> Tuple[bytes, int]:
    """(bytes of int64 (node id, OS tid, start, duration) per traced occurrence, dropped)."""
