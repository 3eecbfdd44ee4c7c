"""A per-callpath summary of a profile across ranks, as a text table."""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np

from ._profile import Profile

Callpath = Tuple[str, ...]
_UNITS = (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9))


def summary(profile: Profile) -> str:
    """One line per callpath, as a tree: on how many ranks it ran, the min,
    mean and max across those ranks of each rank's total time in it (all
    executions and occurrences), and the slowest rank."""
    rows = []
    for path in _tree_order(profile.callpaths):
        totals, ran = [], []
        for rank in range(profile.nranks):
            series = profile.series(path, rank)
            if any(series):
                ran.append(rank)
                totals.append(sum(map(sum, series)))
        rows.append((path, ran, np.array(totals)))
    biggest = max((t.max() for _, _, t in rows if len(t)), default=0.0)
    unit, scale = next(((u, s) for u, s in _UNITS if biggest >= s), _UNITS[-1])
    table = [("callpath", "ranks", f"min {unit}", f"mean {unit}", f"max {unit}", "slowest")]
    for path, ran, totals in rows:
        label = "  " * (len(path) - 1) + _printable(path[-1])
        if not ran:
            table.append((label, f"0/{profile.nranks}", "-", "-", "-", "-"))
            continue
        table.append((label, f"{len(ran)}/{profile.nranks}",
                      *(f"{v / scale:.3f}" for v in (totals.min(), totals.mean(), totals.max())),
                      f"rank {ran[int(totals.argmax())]}"))
    head = (f"{profile.name}: {profile.nranks} ranks, {len(profile.callpaths)} callpaths, "
            f"{len(profile.files)} file(s); time per rank summed over executions")
    return "\n".join([head, *_align(table)])


def _tree_order(paths: Sequence[Callpath]) -> List[Callpath]:
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


def _printable(name: str) -> str:
    return name if name.isprintable() else repr(name)[1:-1]


def _align(table: Sequence[Sequence[str]]) -> List[str]:
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return ["  ".join([row[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(row[1:], widths[1:]))])
            for row in table]
