"""A callpath as a user gives it, to the profile's own: every function that
takes a callpath (``Profile.loop``, ``value``, ``series``, ``comm_matrix``,
``pop``, ``tinyprof.pop_history``, ``tinyprof mpi``/``pop --callpath``)
reads it here, so that they agree on what a string means.

A callpath is a sequence of names, root first, or a string: one region's
name, or a path written as the commands print it, ``main<solve`` (or
``main/solve``). Names hold ``<`` and ``/`` themselves (``<module>
(app.py:3)``, a file's path), so a string is read against the profile's
tree: the callpath with the fewest names that spells it, a whole root name
before any split.
"""
from __future__ import annotations

import bisect
from typing import Dict, List, Optional, Sequence, Set, Tuple, Union, cast

import numpy as np

from ..errors import excerpt
from ..format.callpath import Callpath, Path

Spec = Union[str, Sequence[str]]      # what a user gives as a callpath
SEPARATORS = "</"


def spelled(spec: Spec) -> str:
    """``spec`` as the commands write a callpath, for messages."""
    return spec if isinstance(spec, str) else "<".join(spec)


class Tree:
    """The callpaths of a profile by parent and name, built once (linear in
    them): finding one, and the regions below it, costs no walk of the depth."""

    def __init__(self, callpaths: Sequence[Path], where: str = "the profile") -> None:
        self.callpaths = callpaths
        self.where = where                  # for messages: "profile 'heat'"
        self.rows: Dict[Path, int] = {}
        self.children: Dict[Path, Dict[str, Path]] = {(): {}}
        for row, path in enumerate(callpaths):
            self.rows[path] = row
            self.children[path] = {}
            # a parent comes before its children (in every file, so in the profile)
            self.children[path[:-1]][path[-1]] = path

    def find(self, spec: Spec) -> Optional[Path]:
        """The profile's callpath that ``spec`` names (see the module), None if none."""
        if isinstance(spec, str):
            return self._parse(spec)
        # a tuple or Callpath as it is: its hash is kept, the profile's own is found at once
        path = spec if isinstance(spec, (tuple, Callpath)) else tuple(spec)
        row = self.rows.get(cast(Path, path))
        if row is None and not all(isinstance(name, str) for name in path):
            raise TypeError(f"a callpath is a string or a sequence of names (str), not {spec!r:.80}")
        return None if row is None else self.callpaths[row]

    def get(self, spec: Spec) -> Path:
        """:meth:`find`, or KeyError ``no callpath 'a<b' in profile 'p'``."""
        path = self.find(spec)
        if path is None:
            raise KeyError(f"no callpath {excerpt(spelled(spec))} in {self.where}")
        return path

    def below(self, path: Optional[Path]) -> np.ndarray:
        """Which callpaths are ``path`` (one of them) or below it (bool, in
        order); all for None."""
        if path is None:
            return np.ones(len(self.callpaths), bool)
        keep = np.zeros(len(self.callpaths), bool)
        todo = [path]
        while todo:
            node = todo.pop()
            keep[self.rows[node]] = True
            todo.extend(self.children[node].values())
        return keep

    def within(self, specs: Union[Spec, Sequence[Spec]]) -> Optional[Set[Path]]:
        """The callpaths in the regions ``specs`` (callpaths; a string is one)
        or below them, None (all) when none is given; KeyError for one not here."""
        if isinstance(specs, str):
            specs = [specs]
        if not specs:
            return None
        keep = np.zeros(len(self.callpaths), bool)
        for spec in specs:
            keep |= self.below(self.get(spec))
        return {path for path, k in zip(self.callpaths, keep.tolist()) if k}

    def _parse(self, text: str) -> Optional[Path]:
        """Breadth first from the roots: each state is a node and where the
        rest of ``text`` starts, so the first level that ends the text has the
        fewest names. Per state, the node's children or the separators left,
        whichever are fewer: linear in a deep chain's text."""
        ends = [i for i, c in enumerate(text) if c in SEPARATORS] + [len(text)]
        level: List[Tuple[Path, int]] = [((), 0)]
        seen: Set[Tuple[Path, int]] = set()
        while level:
            found: List[Path] = []
            following: List[Tuple[Path, int]] = []
            for node, start in level:
                kids = self.children[node]
                first = bisect.bisect_left(ends, start)
                if len(kids) < len(ends) - first:
                    steps = [(name, start + len(name)) for name in kids
                             if text.startswith(name, start) and
                             (start + len(name) == len(text) or text[start + len(name)] in SEPARATORS)]
                else:
                    steps = [(text[start:end], end) for end in ends[first:]]
                for name, end in steps:
                    child = kids.get(name)
                    if child is None:
                        continue
                    if end == len(text):
                        found.append(child)
                    elif (child, end + 1) not in seen:
                        seen.add((child, end + 1))
                        following.append((child, end + 1))
            if len(found) > 1:
                raise KeyError(f"callpath {excerpt(text)} is ambiguous: it names {_shown(found[0])} "
                               f"and {_shown(found[1])}; give it as a sequence of names")
            if found:
                return found[0]
            level = following
        return None


def _shown(path: Path, most: int = 6) -> str:
    """A callpath as a tuple of names for a message, its first ``most`` names."""
    names = [excerpt(name) for name in path[:most]]
    return f"({', '.join(names)}{', ...' if len(path) > most else ''})"
