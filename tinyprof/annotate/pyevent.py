"""Pure-Python annotation hot path: the reference semantics, and the fallback
used when the C core (``_core.c``) is not built or ``TINYPROF_PURE=1``.

Both implementations expose the same names: ``Event``, ``Node``, ``root()``,
``current()``, ``executions()``, ``reset()``, ``set_clock()`` and
``set_metric_keys()``. The call tree *is* the event map: one ``Node`` per
callpath, children in first-entry order, values appended in typed arrays.
Exits out of order and misuse follow docs/events.md; ``tinyprof.annotate.args`` checks
the arguments of both implementations.
"""
from __future__ import annotations

import contextvars
import functools
import itertools
import threading
import time
from array import array
from typing import Any, Callable, Dict, Optional

from ..errors import excerpt
from .args import event_args, warn_misuse

_clock: Callable[[], int] = time.perf_counter_ns


class Node:
    """One callpath of the event map: its values and its children."""

    __slots__ = ("name", "parent", "depth", "id", "children", "loop", "common", "times",
                 "execs", "last_exec", "consistent", "metrics")
    _ids = itertools.count(1)

    def __init__(self, name: str, parent: Optional[Node], loop: int = 0,
                 common: bool = True) -> None:
        self.name = name
        self.parent = parent
        self.depth: int = 0 if parent is None else parent.depth + 1   # the root's is 0
        # as the C core's; no MPI interposer can read this core's current node
        self.id: int = 0 if parent is None else next(Node._ids)
        self.children: Dict[str, Node] = {}
        self.loop = loop
        self.common = common
        self.times = array("q")        # one int64 per occurrence (loop 2: per execution)
        self.execs = array("q")        # (execution, first index) pairs, on change only
        self.last_exec = -1
        self.consistent: Optional[Dict[str, float]] = None
        self.metrics: Optional[Dict[str, array]] = None   # key -> doubles aligned with times

    @property
    def count(self) -> int:
        """Number of stored time values."""
        return len(self.times)

    def data(self):
        """``(times, execs)`` as bytes of native int64, for the flush."""
        return self.times.tobytes(), self.execs.tobytes()


_root = Node("", None)
_current: contextvars.ContextVar[Node] = contextvars.ContextVar("tinyprof_node", default=_root)
_first_root: Optional[str] = None
_exec = -1
_metric_keys: Dict[str, bool] = {}      # declared key -> consistent? (tinyprof.annotate.metrics.keys)
_metric_warn: Callable[[Node, str], None] = lambda node, key: None
_NAN = float("nan")
# Trace mode: (node id, OS thread id, start, duration) per occurrence, as the C core.
_trace = array("q")
_trace_limit = 0
_trace_dropped = 0


def root() -> Node:
    return _root


def current() -> Node:
    return _current.get()


def executions() -> int:
    return _exec + 1


def reset() -> None:
    """Forget every recorded value (tests, and a fresh profile)."""
    global _first_root, _exec, _trace_dropped
    # In place: _root is the ContextVar's default, which threads started later see.
    Node.__init__(_root, "", None)
    _current.set(_root)
    _first_root = None
    _exec = -1
    del _trace[:]
    _trace_dropped = 0


def trace(limit: int) -> None:
    """Keep the start of up to ``limit`` occurrences (trace mode); 0 turns it off."""
    global _trace_limit
    if limit < 0:
        raise ValueError("tinyprof: the trace limit must be >= 0 and addressable")
    _trace_limit = limit


def trace_records() -> tuple:
    """(bytes of int64 (node id, OS tid, start, duration) per traced occurrence, dropped)."""
    return _trace.tobytes(), _trace_dropped


def set_clock(clock: Optional[Callable[[], int]]) -> None:
    """Replace the nanosecond clock (tests inject deterministic timings)."""
    global _clock
    _clock = clock or time.perf_counter_ns


def set_metric_keys(keys: Dict[str, bool], warn: Callable[[Node, str], None]) -> None:
    """The declared metric keys (a dict, read as it changes: key -> consistent?)
    and ``warn(node, key)``, called for a value of an undeclared key."""
    global _metric_keys, _metric_warn
    _metric_keys, _metric_warn = keys, warn


def _enter_root(name: str) -> None:
    global _first_root, _exec
    if _first_root is None:
        _first_root = name
        _exec = 0
    elif name == _first_root:
        _exec += 1


class Event:
    """A profiled region: ``with Event("solve"):`` or ``@Event("solve")``.

    Exits out of order never raise: see docs/events.md for where the time goes.
    """

    __slots__ = ("name", "is_common", "loop", "values", "_node", "_token", "_start")

    def __init__(self, name: str, is_common: bool = True, loop: int = 0,
                 **values: Any) -> None:
        self.name, self.is_common, self.loop, self.values = event_args(name, is_common, loop,
                                                                       values)
        self._node: Any = None      # the open Node; None: never entered; False: exited

    def __enter__(self) -> Event:
        if self._node:
            warn_misuse("enter", self.name, 2)
            return self
        parent = _current.get()
        node = parent.children.get(self.name)
        if node is None:    # setdefault: a racing thread's new node is not overwritten
            node = parent.children.setdefault(
                self.name, Node(self.name, parent, self.loop, self.is_common))
        if parent is _root:
            _enter_root(self.name)
        self._node = node
        self._token = _current.set(node)
        self._start = _clock()
        return self

    def __exit__(self, *exc: Any) -> None:
        end = _clock()
        node = self._node
        if not node:
            warn_misuse("exit" if node is None else "exit_twice", self.name, 2)
            return
        self._node = False
        if _current.get() is node:
            try:
                _current.reset(self._token)
            except (ValueError, RuntimeError):   # entered in another context
                # An Event's node is never the root: its parent is a Node (no
                # assert here, the hot path).
                _current.set(node.parent)  # type: ignore[arg-type]
        else:
            _close_out_of_order(node)
        _record(node, self._start, end, self.values)

    def __call__(self, func: Callable) -> Callable:
        name, is_common, loop, values = self.name, self.is_common, self.loop, self.values or {}
        if not callable(func):
            raise TypeError(f"tinyprof.Event {excerpt(name)}: can only decorate a callable, "
                            f"not {type(func).__name__}")
        return decorate(Event, name, is_common, loop, values, func)


def decorate(event: Callable[..., Any], name: str, is_common: bool, loop: int, values: Dict[str, Any],
             func: Callable) -> Callable:
    """``func`` run inside a fresh ``event(name, is_common, loop, **values)`` at each call: this
    module's decorator, and the C core's on CPython 3.12 (``decorator.c``'s ``wrapper_create``)."""
    make = functools.partial(event, name, is_common, loop, **values)

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with make():
            return func(*args, **kwargs)
    return wrapper


def _close_out_of_order(node: Node) -> None:
    """``node`` exits but is not the innermost open node of this context.

    If it is an ancestor of that one (the inner ones were left open, as by a
    suspended generator), its parent becomes current; otherwise (it was
    abandoned before, or opened in another context) nothing changes.
    """
    cur = _current.get()
    # Only the root has no parent, and its depth is 0: cur (depth > 0) and
    # node (an Event's) are not the root (no assert here, the hot path).
    while cur.depth > node.depth:
        cur = cur.parent  # type: ignore[assignment]
    if cur is node:
        _current.set(node.parent)  # type: ignore[arg-type]


def _record(node: Node, start: int, end: int, values: Optional[dict]) -> None:
    global _trace_dropped
    if _trace_limit:
        if len(_trace) < 4 * _trace_limit:
            _trace.extend((node.id, threading.get_native_id(), start, end - start))
        else:
            _trace_dropped += 1
    elapsed = end - start
    times = node.times
    if node.last_exec != _exec:
        # Threads race here: the boundary goes in first, whole (one extend is
        # atomic under the GIL), and only then last_exec, so that no thread
        # appends a time before a boundary covering it. A racing thread adds
        # a second boundary at or after the first: collect() keeps the first.
        node.execs.extend((_exec, len(times)))
        node.last_exec = _exec
        times.append(elapsed)
    elif node.loop == 2:
        times[-1] += elapsed
    else:
        times.append(elapsed)
    if values:
        _record_metrics(node, values)


def _record_metrics(node: Node, values: Dict[str, float]) -> None:
    """Store the metric values of the occurrence just recorded on ``node``."""
    index = len(node.times) - 1
    for key, value in values.items():
        consistent = _metric_keys.get(key)
        if consistent is None:
            _metric_warn(node, key)
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
