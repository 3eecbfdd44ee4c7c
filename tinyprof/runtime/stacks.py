"""Where a rank's MPI calls and time come from in its Python code, with no
annotation: MPI call sites and sampled stacks (docs/mpi.md#call-sites,
docs/unannotated.md).

Both become ordinary callpaths, added below the event map's nodes when a
flush or snapshot copies it (``Added.extend``), so every reader, view and
converter shows them; nothing is added to Event enter and exit.

- **Sites** (``Profiler(sites=K)``): libtinyprof_mpi asks ``_frames``'s
  source function, instead of the core's, for the node of each MPI call; it
  returns a site id for (current node, K innermost frames of the program),
  and ``Added`` names the site's callpath ``function (file:line)`` of the
  calling line, below that node.
- **Samples** (``Profiler(sample=HZ)``): a helper thread wakes HZ times a
  second; every thread's stack is read and counted by (execution, the
  thread's innermost open event, thread, code objects, innermost
  instruction), in C (``_frames.Samples``; ``PySamples`` from
  ``sys._current_frames`` on other Pythons). While the main thread runs
  Python, it takes the sample itself, asked by a pending call, so that it
  never hands the GIL over for a sample; else the helper thread takes the
  GIL. The counts are named when read (``Sampler.counts``, at a flush or
  snapshot): a frame is ``function (file:line)`` of the function's
  definition, a thread other than the main one adds ``thread <name>``
  above its frames (threading's name; a thread it had not named yet when
  sampled is counted under a stand-in, ``_StandIn``, named when read), and
  a thread inside an mpi4py call ends in
  ``MPI_<method>``. A sample stands for the time since the previous one:
  the interval when the sampler keeps up, more when it could not. Each
  callpath's value per execution is the time of its samples and those
  below it.
"""
from __future__ import annotations

import dis
import importlib.util
import os
import sys
import sysconfig
import threading
import time
import warnings
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from .. import annotate
from . import lifecycle

if TYPE_CHECKING:       # numpy with it: loaded at the first flush, not at start (docs/performance.md)
    from .collect import LocalEvent

try:
    from . import _frames  # type: ignore[attr-defined]
except ImportError:         # not built: no sites, samples below the root
    _frames = None

_TINYPROF = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_NONE: Dict[str, Any] = {}
PREFIX = "tinyprof-"        # tinyprof's own threads: never sampled
_STACKS = 10_000            # distinct stacks named, then named afresh
_TABLE = 50_000             # stacks counted, then named (Sampler.counts) and counted afresh


def skipped_prefixes() -> Tuple[str, ...]:
    """Paths whose frames are never a site's nor a sample's: tinyprof's, mpi4py's."""
    spec = importlib.util.find_spec("mpi4py")
    mpi4py = [os.path.dirname(spec.origin) + os.sep] if spec is not None and spec.origin else []
    return (_TINYPROF, *mpi4py)


def sites_unavailable() -> Optional[str]:
    """Why MPI call sites cannot be read here, or None."""
    if _frames is None:
        return "tinyprof's _frames extension was not built"
    if not _frames.sites_supported():
        return ("reading call sites needs CPython 3.11, 3.12 or 3.13 with the GIL "
                f"(this is {sys.version.split()[0]})")
    return None


def site_rules() -> Tuple[Tuple[str, bool], ...]:
    """(path prefix, skipped?) in order, the first that a file starts with
    deciding: a site is the program's line, not tinyprof's, mpi4py's nor
    the standard library's (threading's, when a pool's thread calls MPI),
    but may be an installed package's."""
    packages = [p + os.sep for p in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}]
    stdlib = [p + os.sep for p in {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]}]
    return (*((p, True) for p in skipped_prefixes()), *((p, False) for p in packages),
            *((p, True) for p in stdlib))


def site_source(core_source: int, depth: int) -> int:
    """A fresh site table for ``depth`` frames above the C core's source
    function (an address); the address of the source function that reads sites."""
    return _frames.sites_start(core_source, depth, site_rules())


class AddedNode:
    """The hot-path ``node`` of an added callpath: stable from one copy to
    the next (snapshot bases are keyed by it); ``ids`` are the MPI library's
    node ids that it stands for (sites), ``id`` the first (or a negative one)."""

    __slots__ = ("id", "ids")

    def __init__(self, ident: int) -> None:
        self.id = ident
        self.ids: List[int] = [ident]


class _Tree:
    __slots__ = ("name", "node", "children", "values")

    def __init__(self, name: str, node: AddedNode) -> None:
        self.name, self.node = name, node
        self.children: Dict[str, _Tree] = {}
        self.values: Dict[int, int] = {}        # execution -> ns


class Added:
    """The callpaths sites and samples add to one process's event map."""

    def __init__(self, sites: int = 0, sample: float = 0) -> None:
        self.depth = sites
        self.interval_ns = round(1e9 / sample) if sample else 0
        self.sampler: Optional[Sampler] = None
        self._nodes: Dict[Tuple[int, Tuple[str, ...]], AddedNode] = {}
        self._next = -2
        self.full = False       # the site table was full: later sites charged to their event
        self._lock = threading.Lock()   # a flush and a snapshot thread may extend at once

    def start_sites(self, lib: Any, core_source: int) -> Optional[str]:
        """Point libtinyprof_mpi's node source at the site reader; why not, or None."""
        problem = sites_unavailable()
        if problem is None:
            lib.tinyprof_mpi_set_source(site_source(core_source, self.depth))
        return problem

    def below(self, node: int) -> None:
        """Sites and samples of threads with no open event go below event
        node ``node`` (python -m tinyprof's region; else below the main
        thread's outermost open event, or the root)."""
        if self.depth:
            _frames.sites_below(node)
        if self.sampler is not None:
            self.sampler.default = node

    def start_sampler(self) -> None:
        self.sampler = Sampler(self.interval_ns)
        self.sampler.start()

    def stop(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()

    def state(self) -> int:
        """Changes when what would be added changes (the exit flush's fingerprint)."""
        sites = len(_frames.sites_read()[0]) if self.depth and _frames is not None \
            and _frames.sites_supported() else 0
        return sites + (self.sampler.taken if self.sampler is not None else 0)

    def _node(self, parent: int, path: Tuple[str, ...]) -> AddedNode:
        node = self._nodes.get((parent, path))
        if node is None:
            node = self._nodes[(parent, path)] = AddedNode(self._next)
            self._next -= 1
        return node

    def extend(self, events: List[LocalEvent]) -> List[LocalEvent]:
        """``events`` (``collect``'s pre-order copy of the event map) with the
        callpaths of the sites and samples so far below their nodes, still
        in pre-order. Read after the copy: every node they name is in it."""
        with self._lock:
            return self._extend(events)

    def _extend(self, events: List[LocalEvent]) -> List[LocalEvent]:
        import numpy as np

        from .collect import LocalEvent
        trees: Dict[int, Dict[str, _Tree]] = {}     # parent node id -> its added children

        def tree(parent: int, names: Sequence[str]) -> List[_Tree]:
            level, out = trees.setdefault(parent, {}), []
            for i, name in enumerate(names):
                t = level.get(name)
                if t is None:
                    t = level[name] = _Tree(name, self._node(parent, tuple(names[:i + 1])))
                out.append(t)
                level = t.children
            return out

        if self.depth and _frames is not None and _frames.sites_supported():
            sites, full = _frames.sites_read()
            self.full = self.full or bool(full)
            for site, parent, names in sites:
                leaf = tree(parent, names)[-1].node
                if leaf.id != site and site not in leaf.ids:    # one line, several sites
                    if leaf.id < 0:
                        leaf.id, leaf.ids = site, [site]
                    else:
                        leaf.ids.append(site)
        if self.sampler is not None:
            for (execution, parent, names), ns in self.sampler.counts().items():
                for t in tree(parent, names):
                    t.values[execution] = t.values.get(execution, 0) + ns
        if not trees:
            return events
        where = {e.node.id: i for i, e in enumerate(events)}
        below: Dict[int, List[_Tree]] = {}
        for parent, level in trees.items():
            below.setdefault(where.get(parent, -1) if parent else -1, []).extend(level.values())
        out: List[LocalEvent] = []
        moved: List[int] = []

        def add(t: _Tree, parent: int, prefix: Tuple[str, ...]) -> None:
            path = prefix + (t.name,)
            execs = sorted(t.values)
            times = np.array([t.values[x] for x in execs], np.int64)
            pairs = np.array([[x, i] for i, x in enumerate(execs)], np.int64).reshape(-1)
            here = len(out)
            out.append(LocalEvent(path, 2, False, times, pairs, _NONE, _NONE, parent, t.node))
            for child in t.children.values():
                add(child, here, path)

        for i, e in enumerate(events):
            moved.append(len(out))
            if e.parent is not None and e.parent >= 0:
                e.parent = moved[e.parent]
            out.append(e)
            for t in below.get(i, ()):
                add(t, moved[i], e.path)
        for t in below.get(-1, ()):
            add(t, -1, ())
        return out


def lines(events: Sequence[LocalEvent]) -> Dict[int, int]:
    """Node id -> position in ``events``, sites' ids included: the lines of
    the ``mpi`` section and of the trace."""
    out: Dict[int, int] = {}
    for i, e in enumerate(events):
        for ident in getattr(e.node, "ids", (e.node.id,)) if e.node is not None else ():
            out[ident] = i
    return out


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

    def __init__(self, executions: Any, names: Any, node_type: Any, main: int) -> None:
        self._executions, self._names, self._node_type, self._main = executions, names, node_type, main
        self.default = 0
        self.taken = 0
        self._last = time.perf_counter_ns()
        self._stopped = False
        self._threads: Dict[int, Any] = {}     # id -> name, None (tinyprof's) or a _StandIn
        self._retry = False     # the last refresh made an id stand-in: refresh at the next sample too
        self._lock = threading.Lock()       # a drain from another thread, between two counts
        # (execution, parent, thread, lasti, ids of the codes) -> [ns, codes]
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
                    default = self.default or _outermost(_node_in(contexts.get(self._main), self._node_type))
                parent = default
            keys.append(((execution, parent, None if ident == self._main else thread, top.f_lasti,
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
        return [(x, parent, thread.name if isinstance(thread, _StandIn) else thread, lasti, codes, ns)
                for (x, parent, thread, lasti, _), (ns, codes) in counts.items()]


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
                                                    threading.main_thread().ident)
        self._counts: Dict[Tuple[int, int, Tuple[str, ...]], int] = {}
        self._lock = threading.Lock()
        self._stacks: Dict[Tuple[int, ...], Tuple[Tuple[str, ...], bool, Sequence[Any]]] = {}
        # (id(code), lasti) -> (code, leaf)
        self._calls: Dict[Tuple[int, int], Tuple[Any, Optional[str]]] = {}
        self._skipped = skipped_prefixes()
        self._mpi_names: Optional[frozenset] = None     # known once mpi4py is loaded
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
        ends in ``MPI_<method>``."""
        with self._lock:
            for execution, parent, thread, lasti, codes, ns in self._samples.drain():
                if thread is not None and thread.startswith(PREFIX):
                    continue    # one of tinyprof's, sampled before threading named it
                names = self._named(codes, lasti)
                if thread is not None:
                    names = (f"thread {thread}", *names)
                key = (execution, parent, names)
                self._counts[key] = self._counts.get(key, 0) + ns
            return dict(self._counts)

    def _named(self, codes: Tuple[Any, ...], lasti: int) -> Tuple[str, ...]:
        key = tuple(map(id, codes))
        known = self._stacks.get(key)
        if known is None:
            if len(self._stacks) >= _STACKS:
                self._stacks.clear()
            known = self._stacks[key] = self._names(codes)
        names, top, _ = known
        leaf = self._leaf(codes[0], lasti) if top else None
        return (*names, leaf) if leaf is not None else names

    def _names(self, codes: Sequence[Any]) -> Tuple[Tuple[str, ...], bool, Sequence[Any]]:
        """The names of the program's frames of a stack (code objects,
        innermost first), outermost first; whether the innermost is the
        program's (it may be in an MPI call); the codes (kept: their ids
        are the cache's key)."""
        names = tuple(name for name in map(self._name, reversed(codes)) if name is not None)
        return names, bool(codes) and self._name(codes[0]) is not None, codes

    def _name(self, code: Any) -> Optional[str]:
        """``function (file:line)`` of a frame's code; None for tinyprof's, mpi4py's, frozen."""
        path = code.co_filename
        if path.startswith((*self._skipped, "<frozen ")):
            return None
        name = getattr(code, "co_qualname", code.co_name)
        return f"{name} ({os.path.basename(path)}:{code.co_firstlineno})"

    def _leaf(self, code: Any, lasti: int) -> Optional[str]:
        """``MPI_<method>`` when instruction ``lasti`` of ``code`` calls a
        method named as an MPI operation (mpi4py's are), else None."""
        if self._mpi_names is None:
            if "mpi4py.MPI" not in sys.modules:
                return None
            self._mpi_names = _mpi_names()
        known = self._calls.get((id(code), lasti))
        if known is None or known[0] is not code:
            if len(self._calls) >= _STACKS:
                self._calls.clear()
            name = called_name(code, lasti)
            leaf = f"MPI_{name}" if name is not None and name.lower() in self._mpi_names else None
            known = self._calls[(id(code), lasti)] = (code, leaf)
        return known[1]

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


def called_name(code: Any, lasti: int) -> Optional[str]:
    """The attribute or name a call instruction at ``lasti`` calls
    (``Allreduce`` in ``comm.Allreduce(a, b)``), from the instructions'
    source positions; None if it is no call or cannot be told."""
    instructions = list(dis.get_instructions(code))
    at = next((i for i, ins in enumerate(instructions) if ins.offset == lasti), None)
    if at is None or not instructions[at].opname.startswith("CALL"):
        return None
    pos = instructions[at].positions
    if pos is None or pos.lineno is None:
        return None
    for ins in reversed(instructions[:at]):
        p = ins.positions
        if p is not None and (p.lineno, p.col_offset) == (pos.lineno, pos.col_offset) \
                and ins.opname.startswith("LOAD_") and isinstance(ins.argval, str):
            return ins.argval
    return None


def _mpi_names() -> frozenset:
    """The MPI operations libtinyprof_mpi counts, lower case (mpi4py's methods
    are named after them, in both cases)."""
    from . import capture
    return frozenset(name.lower() for name in capture.op_names())
