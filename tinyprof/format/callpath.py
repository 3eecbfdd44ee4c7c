"""A callpath as the reader gives it: a tuple of names, or past a bound a
:class:`Callpath`, which acts as that tuple in memory linear in a file's lines
(docs/api.md, ``callpaths``)."""
from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Sequence, Tuple, cast

# A callpath as typed: a Callpath acts as the tuple of its names.
Path = Tuple[str, ...]

# CPython's tuple hash (xxHash-based, Objects/tupleobject.c, 64-bit): Callpath
# hashes as the tuple of its names, one step per name from its parent's state.
_XXPRIME_1, _XXPRIME_2, _XXPRIME_5 = 11400714785074694791, 14029467366897019727, 2870177450012600261
_MASK = 2**64 - 1


class Callpath(Sequence[str]):
    """A callpath: the tuple of its names, stored as its last name and its
    parent callpath, so that the callpaths of a file take memory linear in its
    lines, not in the sum of their depths (20,000 nested levels: 20,000 objects,
    not 2·10^8 names). It equals, hashes and sorts as the tuple of its names,
    so either finds the other in a dict; ``p[:-1]`` is the parent (``()`` for
    a root), ``p[-1]`` the last name, both O(1); other access walks the depth."""

    __slots__ = ("parent", "name", "depth", "_state", "_hash")

    def __init__(self, parent: Optional[Callpath], name: str) -> None:
        self.parent, self.name = parent, name
        self.depth: int = parent.depth + 1 if parent is not None else 1
        state = parent._state if parent is not None else _XXPRIME_5
        state = (state + (hash(name) & _MASK) * _XXPRIME_2) & _MASK
        state = (((state << 31) | (state >> 33)) & _MASK) * _XXPRIME_1 & _MASK
        self._state: int = state
        h = (state + (self.depth ^ (_XXPRIME_5 ^ 3527539))) & _MASK
        h = 1546275796 if h == _MASK else h
        self._hash = h - 2**64 if h >= 2**63 else h

    def names(self) -> Tuple[str, ...]:
        """The names, root first, as a tuple."""
        out: List[str] = []
        node: Optional[Callpath] = self
        while node is not None:
            out.append(node.name)
            node = node.parent
        return tuple(reversed(out))

    def __len__(self) -> int:
        return self.depth

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    # Sequence's own versions index name by name: O(depth^2) here.
    def __reversed__(self) -> Iterator[str]:
        return reversed(self.names())

    def __contains__(self, name: object) -> bool:
        return name in self.names()

    def index(self, name: object, start: int = 0, stop: int = 2**63 - 1) -> int:
        return self.names().index(name, start, stop)

    def count(self, name: object) -> int:
        return self.names().count(name)

    def __getitem__(self, index):       # an int or a slice, as a tuple's
        if isinstance(index, slice):
            if index == slice(None, -1) or index == slice(0, -1):
                return self.parent if self.parent is not None else ()
            return self.names()[index]
        if index == -1 or index == self.depth - 1:
            return self.name
        return self.names()[index]

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if isinstance(other, Callpath):
            a, b = self, other      # equal depths and hashes, then name by name up to a shared node
            if a.depth != b.depth or a._hash != b._hash:
                return False
            while a is not b:
                if a.name != b.name:
                    return False
                a, b = a.parent, b.parent     # type: ignore[assignment]  # same depth: both None at once
            return True
        if isinstance(other, tuple):
            return len(other) == self.depth and self.names() == other
        return NotImplemented

    def __lt__(self, other: object) -> bool:
        return self.names() < _names(other)

    def __le__(self, other: object) -> bool:
        return self.names() <= _names(other)

    def __gt__(self, other: object) -> bool:
        return self.names() > _names(other)

    def __ge__(self, other: object) -> bool:
        return self.names() >= _names(other)

    def __add__(self, other: Sequence[str]) -> Tuple[str, ...]:
        return self.names() + _names(other)

    def __radd__(self, other: Sequence[str]) -> Tuple[str, ...]:
        return _names(other) + self.names()

    def __repr__(self) -> str:
        return repr(self.names())

    def __reduce__(self):
        return tuple, (self.names(),)


def _names(path) -> Tuple[str, ...]:
    if isinstance(path, Callpath):
        return path.names()
    if isinstance(path, tuple):
        return path
    raise TypeError(f"a callpath compares with a tuple, not {type(path).__name__}")


_TUPLE_HASH = hash(Callpath(Callpath(None, "a"), "b")) == hash(("a", "b"))
_TUPLE_NAMES_PER_BYTE = 8
_MIN_TUPLE_BOUND = 2**20


def tuple_bound(nbytes: int) -> int:
    """The most names the callpaths of a file of ``nbytes`` bytes hold in all
    as tuples (8 bytes a name): past it, they are Callpaths."""
    return max(_MIN_TUPLE_BOUND, _TUPLE_NAMES_PER_BYTE * nbytes)


def paths_of(parents: List[int], ids: List[int], names: List[str], nbytes: int,
             known: Dict[Path, Path]) -> List[Path]:
    """The callpath of each event line (below line ``parents[i]``, -1: a root,
    named ``names[ids[i]]``), the objects of ``known`` where it has them, the
    others added to it. Plain tuples while their names in all (the sum of the
    depths) stay within :func:`tuple_bound` of the file's ``nbytes``, as every
    ordinary profile's do; else (deep nesting) Callpaths, in memory linear in
    the lines. Also tuples where tuples hash otherwise than Callpath (not
    CPython, not 64-bit)."""
    depths: List[int] = []
    for parent in parents:
        depths.append(depths[parent] + 1 if parent >= 0 else 1)
    linked = _TUPLE_HASH and sum(depths) > tuple_bound(nbytes)
    paths: List[Path] = []
    for parent, name_id in zip(parents, ids):
        above = paths[parent] if parent >= 0 else None
        name = names[name_id]
        path = cast(Path, Callpath(cast(Optional[Callpath], above), name)) if linked \
            else (above or ()) + (name,)
        got = known.setdefault(path, path)
        paths.append(got if type(got) is type(path) else path)    # a Callpath's parent is one
    return paths
