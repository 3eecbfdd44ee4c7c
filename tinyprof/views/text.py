"""What every text view shares: time units, the call tree's order, names
printed safely, and aligned columns."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

Callpath = Tuple[str, ...]
UNITS = (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9))


def tree_order(paths: Sequence[Callpath]) -> List[Callpath]:
    """``paths`` (parents first) in pre-order, siblings in order of appearance."""
    children: Dict[Callpath, List[Callpath]] = {}
    for path in paths:
        children.setdefault(path[:-1], []).append(path)
    out: List[Callpath] = []
    stack = children.get((), [])[::-1]
    while stack:
        path = stack.pop()
        out.append(path)
        stack.extend(children.get(path, [])[::-1])
    return out


def printable(name: str) -> str:
    """``name`` with control characters escaped, as Python would spell them."""
    return name if name.isprintable() else repr(name)[1:-1]


def align(table: Sequence[Sequence[str]], right: Optional[Sequence[int]] = None) -> List[str]:
    """Columns padded to their widest cell: those in ``right`` (by default
    all but the first) right-aligned."""
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    right = range(1, len(widths)) if right is None else right
    return ["  ".join(c.rjust(w) if i in right else c.ljust(w)
                      for i, (c, w) in enumerate(zip(row, widths))).rstrip()
            for row in table]
