"""The event map read straight from the hot path's tree, as a flush copies it
(``collect``), with the few ``Profile`` methods the semantics tests use: what
the annotations recorded, checked without encoding, writing and parsing a file.
tests/annotate/test_annotate.py checks that it agrees with a real flush and read."""
from __future__ import annotations

import math
from typing import Dict, List, Sequence, Tuple

from tinyprof.runtime.collect import LocalEvent, collect

Callpath = Tuple[str, ...]


class Recorded:
    """One process's event map, seen as the profile a flush of it would give."""

    def __init__(self, twin) -> None:
        self.events: Dict[Callpath, LocalEvent] = {e.path: e for e in collect(twin.root())}
        self.nranks = 1
        self._executions = twin.executions()

    @property
    def callpaths(self) -> List[Callpath]:
        return list(self.events)

    def executions(self, rank: int) -> int:
        assert rank == 0
        return self._executions

    def loop(self, callpath: Sequence[str]) -> int:
        return self.events[tuple(callpath)].loop

    def series(self, callpath: Sequence[str], rank: int) -> List[List[float]]:
        """Seconds per occurrence, one list per execution: ``execs`` holds
        (execution, index of its first time) for the executions with values."""
        assert rank == 0
        event = self.events[tuple(callpath)]
        times = [t / 1e9 for t in event.times.tolist()]
        pairs = event.execs.reshape(-1, 2).tolist()
        out: List[List[float]] = [[] for _ in range(self._executions)]
        for (execution, first), (_, end) in zip(pairs, pairs[1:] + [[math.inf, len(times)]]):
            out[execution] = times[first:end]
        return out
