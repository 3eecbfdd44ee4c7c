"""Where a rank's MPI calls and time come from in its Python code, with no
annotation: MPI call sites and sampled stacks (docs/mpi.md#call-sites,
docs/unannotated.md).

Both become ordinary callpaths, added below the event map's nodes when a
flush or snapshot copies it (``Unannotated.extend``), so every reader, view and
converter shows them; nothing is added to Event enter and exit.

- **Sites** (``Profiler(sites=K)``, ``sites.py``): libtinyprof_mpi asks
  ``_frames``'s source function for the node of each MPI call; it returns a
  site id for (current node, K innermost frames of the program), and
  ``Unannotated`` names the site's callpath ``function (file:line)`` of the
  calling line, below that node.
- **Samples** (``Profiler(sample=HZ)``, ``sampler.py``): every thread's
  stack, counted HZ times a second and named when read; the sampled
  callpaths below an event that has closed never add up to more than its
  time (``Unannotated.extend``).
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from . import sites
from .sampler import Sampler, running_events

if TYPE_CHECKING:       # numpy with it: loaded at the first flush, not at start (docs/performance.md)
    from .collect import LocalEvent

_NONE: Dict[str, Any] = {}


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


class Unannotated:
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
        problem = sites.sites_unavailable()
        if problem is None:
            lib.tinyprof_mpi_set_source(sites.site_source(core_source, self.depth))
        return problem

    def below(self, node: int) -> None:
        """Sites and samples of threads with no open event go below event
        node ``node`` (python -m tinyprof's region; else below the main
        thread's outermost open event, or the root)."""
        if self.depth:
            sites.below(node)
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
        found = len(sites.read()[0]) if self.depth else 0
        return found + (self.sampler.taken if self.sampler is not None else 0)

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

        if self.depth:
            found, full = sites.read()
            self.full = self.full or full
            for site, parent, names in found:
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
        running = running_events()
        if running is not None:
            inner: Dict[int, Dict[int, int]] = {}      # event -> its events' time per execution
            for e in events:
                if e.parent is not None and e.parent >= 0 and e.parent in below:
                    _add(inner.setdefault(e.parent, {}), _per_execution(e))
            for i, tops in below.items():
                if i >= 0 and events[i].node.id not in running:
                    room = _per_execution(events[i])
                    _add(room, {x: -ns for x, ns in inner.get(i, {}).items()})
                    _cap(tops, room)
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


def _per_execution(e: LocalEvent) -> Dict[int, int]:
    """An event's time per execution (the sum of its values in it), in ns."""
    times, pairs = e.times, e.execs.reshape(-1, 2)
    ends = [*pairs[1:, 1].tolist(), len(times)]
    return {int(x): int(times[first:end].sum()) for (x, first), end in zip(pairs.tolist(), ends)}


def _add(into: Dict[int, int], values: Dict[int, int]) -> None:
    for x, ns in values.items():
        into[x] = into.get(x, 0) + ns


def _cap(level: List[_Tree], room: Dict[int, int]) -> None:
    """The sampled trees below a closed event, scaled down per execution,
    keeping their shares, where they add up to more than ``room`` (the
    event's time less its events' below it): threads that ran at once, a
    sample standing for time before the event opened. Rounded down, so a
    tree's value stays at least its children's."""
    total: Dict[int, int] = {}
    for t in level:
        _add(total, t.values)
    scale = {x: max(room.get(x, 0), 0) / ns for x, ns in total.items() if ns > max(room.get(x, 0), 0)}
    stack = list(level) if scale else []
    while stack:
        t = stack.pop()
        for x, f in scale.items():
            if x in t.values:
                t.values[x] = int(t.values[x] * f)
        stack.extend(t.children.values())


