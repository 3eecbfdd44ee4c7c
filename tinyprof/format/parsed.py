"""A profile file as read (docs/format.md): :class:`ParsedFile`, its flat
:class:`Values`, and :class:`EventData`, one callpath's view of them. The reader
(reader.py) makes them; analysis/ reads them."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Dict, List

import numpy as np

from . import meta_section
from .callpath import Path, paths_of
from .encoding import Header


@dataclass
class EventData:
    """One callpath of one file: values of all its ranks, flattened.

    Execution ``e`` of the file's rank ``r`` holds ``times[offsets[j]:offsets[j+1]]``
    with ``j = exec_base[r] + e`` (``exec_base`` is per file). The reader stores
    only the executions that have values (``slots``, increasing, with their
    occurrence ``counts``); ``offsets`` is built on first use, so that reading
    costs no memory per execution of the file on every line.
    """

    loop: int
    consistent: Dict[str, float]
    times: np.ndarray
    metrics: Dict[str, np.ndarray]
    slots: np.ndarray
    counts: np.ndarray
    nexec: int                     # executions of all ranks of the file

    @cached_property
    def offsets(self) -> np.ndarray:
        counts = np.zeros(self.nexec + 1, np.int64)
        counts[self.slots + 1] = self.counts
        return np.cumsum(counts)


@dataclass
class Values:
    """Every value of a file's event lines in flat arrays, line after line.

    Line ``i`` holds ``times[line_values[i]:line_values[i+1]]`` (and the same
    range of each inconsistent metric, NaN where missing), recorded in the
    executions ``slots[line_slots[i]:line_slots[i+1]]`` (numbered across the
    file's ranks, see ``ParsedFile.exec_base``) with ``counts`` values each.
    """

    loops: List[int]
    consistent: List[Dict[str, float]]
    times: np.ndarray                   # int64
    metrics: Dict[str, np.ndarray]      # float64, aligned with times
    slots: np.ndarray                   # int64
    counts: np.ndarray                  # int64, aligned with slots
    line_values: np.ndarray             # int64, one more than the lines
    line_slots: np.ndarray              # int64, one more than the lines


@dataclass
class ParsedFile:
    """One file as read. Event line ``i`` is the callpath ending in name
    ``names[ids[i]]`` below line ``parents[i]`` (-1: a root callpath);
    ``values`` holds every value; ``lines`` and ``events`` (by callpath, as
    tuples of names) give each line's as views of them."""

    path: str
    header: Header
    exec_base: np.ndarray
    names: List[str]
    parents: List[int]
    ids: List[int]
    values: Values
    sections: Dict[str, bytes]          # payloads of the KNOWN_SECTIONS present
    section_lines: Dict[str, int] = field(default_factory=dict)   # line where each payload starts
    nbytes: int = 0                     # the file's size: paths as tuples within tuple_bound of it
    metadata: Dict[str, meta_section.Value] = field(default_factory=dict)   # its meta section

    @cached_property
    def lines(self) -> List[EventData]:
        v, nexec = self.values, int(self.exec_base[-1])
        bounds, slot_bounds = v.line_values.tolist(), v.line_slots.tolist()
        return [EventData(loop, cons, v.times[a:b], {k: m[a:b] for k, m in v.metrics.items()},
                          v.slots[c:d], v.counts[c:d], nexec)
                for loop, cons, a, b, c, d in zip(v.loops, v.consistent, bounds, bounds[1:],
                                                   slot_bounds, slot_bounds[1:])]

    @cached_property
    def paths(self) -> List[Path]:
        """The callpath of each event line, built on first use: a tuple of
        names, or past :func:`tuple_bound` a :class:`Callpath`, which acts as
        one in memory linear in the lines whatever their depth."""
        return paths_of(self.parents, self.ids, self.names, self.nbytes, {})

    def share_paths(self, known: Dict[Path, Path]) -> None:
        """Make :attr:`paths` the objects of ``known`` where it has them, and add
        the others: the files of one profile then share their callpaths, so that
        looking one file's up among another's is O(1), not a walk of the depth
        (a callpath whose parent is the same object compares at its last name)."""
        self.__dict__["paths"] = paths_of(self.parents, self.ids, self.names, self.nbytes, known)
        self.__dict__.pop("events", None)

    @cached_property
    def events(self) -> Dict[Path, EventData]:
        return dict(zip(self.paths, self.lines))
