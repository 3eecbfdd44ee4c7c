"""Sampled stacks (``Profiler(sample=HZ)``, docs/unannotated.md).

A helper thread wakes HZ times a
second; every thread's stack is read and counted by (execution, the
thread's innermost open event, thread, the MPI call it is inside, code
objects), in C (``_frames.Samples``; ``PySamples`` from
``sys._current_frames`` on other Pythons). While the main thread runs
Python, it takes the sample itself, asked by a pending call, so that it
never hands the GIL over for a sample; else the helper thread takes the
GIL. The counts are named when read (``Sampler.counts``, at a flush or
snapshot): a frame is ``function (file:line)`` of the function's
definition, a thread other than the main one adds ``thread <name>``
above its frames (threading's name; a thread it had not named yet when
sampled is counted under a stand-in, ``_StandIn``, named when read), and
a thread inside an MPI call ends in ``MPI_<op>``: libtinyprof_mpi's word
(``tinyprof_mpi_in_call``), asked per thread and sample, never a name's,
so without MPI capture nothing is labelled MPI. A sample stands for the
time since the previous one: the interval when the sampler keeps up, more
when it could not. Each callpath's value per execution is the time of its
samples and those below it. tinyprof's own work is never charged to the
program: a stack inside tinyprof's runtime (a flush, a snapshot, numpy
imported by them) is left out, sampling stops before the exit flush, and
a thread with no open event is charged to the main thread's events only
while one is open; the sampled callpaths below an event that has closed
never add up to more than its time (``unannotated.Unannotated.extend``).
"""
from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .. import annotate
from . import capture, lifecycle
from .sites import skipped_prefixes

try:
    from . import _frames
except ImportError:         # not built: no sites, samples below the root
    _frames = None  # type: ignore[assignment]  # a module or None, which mypy cannot type

_RUNTIME = os.path.dirname(os.path.abspath(__file__)) + os.sep     # a stack in it: tinyprof's own work
PREFIX = "tinyprof-"        # tinyprof's own threads: never sampled
_STACKS = 10_000            # distinct stacks named, then named afresh
_TABLE = 50_000             # stacks counted, then named (Sampler.counts) and counted afresh


def thread_names() -> Dict[int, Optional[str]]:
    """{thread id: name}, None for tinyprof's threads (never sampled)."""
    return {t.ident: None if t.name.startswith(PREFIX) else t.name
            for t in threading.enumerate() if t.ident is not None}


Raw = Tuple[int, int, Optional[str], int, Tuple[Any, ...], int]


class _StandIn:
    """A thread that ``threading`` did not name when it was sampled (started
    and not registered yet, or started with ``_thread``): its samples are
    counted under this (compared by identity), as under ``_frames.Samples``'s
    stand-in. Named by the ``threading.Thread`` its outermost frame runs
    (``self`` of ``Thread._bootstrap``), when read; else by a later refresh
    that finds the thread alive and named; else (it ended unnamed) its id."""

    __slots__ = ("_name", "thread")

    def __init__(self, ident: int, top: Any) -> None:
        self._name = str(ident)
        while top.f_back is not None:
            top = top.f_back
        code = top.f_code
        first = top.f_locals.get(code.co_varnames[0]) if code.co_argcount else None
        self.thread = first if isinstance(first, threading.Thread) else None

    @property
    def name(self) -> str:
        return self._name if self.thread is None else self.thread.name

    @name.setter
    def name(self, name: str) -> None:
        self._name, self.thread = name, None


class PySamples:
    """``_frames.Samples`` in Python, from ``sys._current_frames()``: where
    the frames cannot be read directly (other Pythons than CPython 3.11 to
    3.13 with the GIL, or the extension not built: then every sample is
    below the default parent)."""

    def __init__(self, executions: Any, names: Any, node_type: Any, main: int, in_call: int = 0) -> None:
        self._executions, self._names, self._node_type, self._main = executions, names, node_type, main
        self._in_call = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64)(in_call) if in_call else None
        self.default = 0
        self.taken = 0
        self._last = time.perf_counter_ns()
        self._stopped = False
        self._threads: Dict[int, Any] = {}     # id -> name, None (tinyprof's) or a _StandIn
        self._retry = False     # the last refresh made an id stand-in: refresh at the next sample too
        self._lock = threading.Lock()       # a drain from another thread, between two counts
        # (execution, parent, thread, MPI op or -1, ids of the codes) -> [ns, codes]
        self._counts: Dict[Tuple[int, int, Any, int, Tuple[int, ...]], List[Any]] = {}

    def take(self) -> None:
        contexts = _frames.contexts() if _frames is not None else {}
        frames = sys._current_frames()
        if self.taken % 100 == 0 or self._retry or not self._threads.keys() >= frames.keys():
            self._refresh(frames)
        execution = max(self._executions() - 1, 0)
        now = time.perf_counter_ns()
        weight, self._last = now - self._last, now
        default: Optional[int] = None      # of threads with no open event, when first needed
        keys = []
        for ident, top in frames.items():
            thread = self._threads.get(ident)
            if thread is None:
                continue
            codes: List[Any] = []
            frame: Any = top
            while frame is not None:
                codes.append(frame.f_code)
                frame = frame.f_back
            node = _node_in(contexts.get(ident), self._node_type)
            if node is not None:
                parent: int = node.id
            else:
                if default is None:
                    # below the main thread's events while one is open, never after they
                    # closed (without _frames, the events are not known: the default)
                    top = _node_in(contexts.get(self._main), self._node_type)
                    default = 0 if top is None and _frames is not None else self.default or _outermost(top)
                parent = default
            op = self._in_call(ident) if self._in_call is not None else -1
            keys.append(((execution, parent, None if ident == self._main else thread, op,
                          tuple(map(id, codes))), codes))
        with self._lock:
            for key, codes in keys:
                entry = self._counts.get(key)
                if entry is None:
                    entry = self._counts[key] = [0, tuple(codes)]
                entry[0] += weight
            self.taken += 1

    def _refresh(self, frames: Dict[int, Any]) -> None:
        """The thread names afresh, for the threads with a frame: threading's
        name, else what the table had (not registered yet, or ending), else a
        new stand-in; a stand-in of a thread now named takes its name. (Here
        a thread is told by its id only: one reused between two refreshes is
        taken for the old one.)"""
        names: Dict[int, Any] = self._names()
        threads, made = dict(names), False
        for ident in frames:
            old = self._threads.get(ident)
            if ident in names:
                if isinstance(old, _StandIn) and names[ident] is not None:
                    old.name = names[ident]
            elif ident in self._threads:
                threads[ident] = old
            else:
                threads[ident] = standin = _StandIn(ident, frames[ident])
                made = made or standin.thread is None      # a Thread names itself: no retry
        self._threads, self._retry = threads, made

    def run(self, interval_ns: int, limit: int) -> bool:
        while not self._stopped:
            # time.sleep, not Event.wait: a wake-up runs no Python code of threading's
            time.sleep(interval_ns / 1e9)
            if not self._stopped:
                self.take()
                if len(self._counts) >= limit:
                    return True
        return False

    def stop(self) -> None:
        self._stopped = True

    def drain(self) -> List[Raw]:
        """The counts since the last drain; the names are refreshed first
        while a thread is known by its id only."""
        if any(isinstance(t, _StandIn) for t in self._threads.values()):
            self._refresh(sys._current_frames())
        with self._lock:
            counts, self._counts = self._counts, {}
        return [(x, parent, thread.name if isinstance(thread, _StandIn) else thread, op, codes, ns)
                for (x, parent, thread, op, _), (ns, codes) in counts.items()]


def samples_type() -> Any:
    """What counts the samples here: ``_frames.Samples``, else ``PySamples``."""
    return _frames.Samples if _frames is not None and _frames.sites_supported() else PySamples


class Sampler:
    """This process's threads' Python stacks, read every ``interval_ns`` by
    a helper thread that makes no MPI call; each stack's time in ns. A
    sample only counts the stack's code objects (``samples``, in C where
    it can: ``_frames.Samples``); they are named when read (``counts``)."""

    def __init__(self, interval_ns: int, samples: Any = None) -> None:
        self.interval_ns = interval_ns
        self._samples = (samples or samples_type())(annotate.impl.executions, thread_names,
                                                    type(annotate.impl.root()),
                                                    threading.main_thread().ident,
                                                    capture.in_call_address())
        self._counts: Dict[Tuple[int, int, Tuple[str, ...]], int] = {}
        self._lock = threading.Lock()
        # ids of a stack's codes -> (its names, None: tinyprof's own work; the codes, kept)
        self._stacks: Dict[Tuple[int, ...], Tuple[Optional[Tuple[str, ...]], Sequence[Any]]] = {}
        self._ops: List[str] = []       # the library's op names, once a sample is in one
        self._skipped = skipped_prefixes()
        self.thread: Optional[threading.Thread] = None

    @property
    def taken(self) -> int:
        return int(self._samples.taken)

    @property
    def by_main(self) -> int:
        """Samples taken by the main thread itself, asked while it ran Python (C table only)."""
        return int(getattr(self._samples, "by_main", 0))

    @property
    def main_ns(self) -> int:
        """The main thread's time in the samples it took (``by_main``), in ns."""
        return int(getattr(self._samples, "main_ns", 0))

    @property
    def default(self) -> int:
        """Parent of threads with no open event (0: the main thread's outermost open event)."""
        return int(self._samples.default)

    @default.setter
    def default(self, node: int) -> None:
        self._samples.default = node

    def start(self) -> None:
        self.thread = lifecycle.start_thread(self._loop, (), PREFIX + "sampler")

    def stop(self) -> None:
        """The thread ends within one interval."""
        self._samples.stop()

    def take(self) -> None:
        """One sample of every thread but tinyprof's."""
        self._samples.take()

    def _loop(self) -> None:
        try:
            while self._samples.run(self.interval_ns, _TABLE):
                self.counts()       # the table, full, named and emptied
        except Exception as e:  # never into the application: say so, stop sampling
            warnings.warn(f"tinyprof: sampling stopped: {type(e).__name__}: {e}", RuntimeWarning,
                          stacklevel=1)

    def counts(self) -> Dict[Tuple[int, int, Tuple[str, ...]], int]:
        """ns per (execution, parent node id, names outermost first): a
        frame is ``function (file:line)``, a thread other than the main one
        adds ``thread <name>`` above its frames, a thread in an MPI call
        ends in ``MPI_<op>``; stacks in tinyprof's own work are left out."""
        with self._lock:
            for execution, parent, thread, op, codes, ns in self._samples.drain():
                if thread is not None and thread.startswith(PREFIX):
                    continue    # one of tinyprof's, sampled before threading named it
                names = self._named(codes)
                if names is None:
                    continue
                if op >= 0:
                    names = (*names, f"MPI_{self._op(op)}")
                if thread is not None:
                    names = (f"thread {thread}", *names)
                key = (execution, parent, names)
                self._counts[key] = self._counts.get(key, 0) + ns
            return dict(self._counts)

    def _named(self, codes: Tuple[Any, ...]) -> Optional[Tuple[str, ...]]:
        key = tuple(map(id, codes))
        known = self._stacks.get(key)
        if known is None:
            if len(self._stacks) >= _STACKS:
                self._stacks.clear()
            own = any(code.co_filename.startswith(_RUNTIME) for code in codes)
            known = self._stacks[key] = (None if own else self._names(codes), codes)
        return known[0]

    def _names(self, codes: Sequence[Any]) -> Tuple[str, ...]:
        """The names of the program's frames of a stack (code objects,
        innermost first), outermost first."""
        return tuple(name for name in map(self._name, reversed(codes)) if name is not None)

    def _name(self, code: Any) -> Optional[str]:
        """``function (file:line)`` of a frame's code; None for tinyprof's, mpi4py's, frozen."""
        path = code.co_filename
        if path.startswith((*self._skipped, "<frozen ")):
            return None
        name = getattr(code, "co_qualname", code.co_name)
        return f"{name} ({os.path.basename(path)}:{code.co_firstlineno})"

    def _op(self, op: int) -> str:
        """The name of the library's op code ``op`` ("Allreduce")."""
        if op >= len(self._ops):
            self._ops = capture.op_names()
        return self._ops[op] if op < len(self._ops) else f"Op{op}"


def _node_in(context: Any, node_type: Any) -> Any:
    """The C core's current node in a thread's context (its ContextVar's value), or None."""
    if context is None:
        return None
    for value in context.values():
        if type(value) is node_type:
            return value if getattr(value, "parent", None) is not None else None
    return None


def _outermost(node: Any) -> int:
    """The id of the outermost open event above ``node`` (0: none)."""
    if node is None:
        return 0
    while node.parent is not None and node.parent.parent is not None:
        node = node.parent
    return node.id


def running_events() -> Optional[set]:
    """Ids of the events open now on some thread (with those around them);
    None where the threads' events cannot be read (``_frames`` not built)."""
    if not _frames:
        return None
    node_type, out = type(annotate.impl.root()), set()
    for context in _frames.contexts().values():
        node = _node_in(context, node_type)
        while node is not None and node.parent is not None:
            out.add(node.id)
            node = node.parent
    return out
