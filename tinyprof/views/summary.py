"""A per-callpath summary of a profile across ranks, as a text table
(``tinyprof show`` and the demo)."""
from __future__ import annotations

import shlex
from typing import List, Optional, Tuple

import numpy as np

from ..analysis.profile import Profile
from .text import UNITS, align, printable, tree_order


def summary(profile: Profile, source: Optional[str] = None) -> str:
    """One line per callpath, as a tree, all times in one unit: on how many
    ranks it ran; the min, mean and max across those ranks of each rank's
    inclusive time in it (all executions and occurrences); the mean exclusive
    time; its share of the run (inclusive time summed over ranks, over the
    run's time summed over ranks); its imbalance (max over mean) and slowest
    rank. ``source``, the path the profile was read from, goes into the last
    line, which says where to look next."""
    from ..analysis.values import aggregate

    agg = aggregate(profile, "sum")
    ran = agg.count > 0
    roots = np.array([len(p) == 1 for p in profile.callpaths])
    run_total = float(agg.time_inc[roots].sum())
    biggest = float(agg.time_inc.max()) if agg.time_inc.size else 0.0
    unit, scale = next(((u, s) for u, s in UNITS if biggest >= s), UNITS[-1])
    table: List[Tuple[str, ...]] = [("callpath", "ranks", "min", "mean", "max", "excl mean", "% run",
                                      "imbalance", "slowest")]
    row_of = {path: i for i, path in enumerate(profile.callpaths)}
    for path in tree_order(profile.callpaths):
        i = row_of[path]
        label = "  " * (len(path) - 1) + printable(path[-1])
        ranks = np.flatnonzero(ran[i])
        if not len(ranks):
            table.append((label, f"0/{profile.nranks}", *["-"] * 7))
            continue
        inc, exc = agg.time_inc[i, ranks], agg.time_exc[i, ranks]
        mean = inc.mean()
        table.append((label, f"{len(ranks)}/{profile.nranks}",
                      *(f"{v / scale:.3f}" for v in (inc.min(), mean, inc.max(), exc.mean())),
                      f"{100 * inc.sum() / run_total:.1f}" if run_total else "-",
                      f"{inc.max() / mean:.2f}x" if mean else "-",
                      f"rank {ranks[int(inc.argmax())]}"))
    head = (f"{profile.name}: {profile.nranks} ranks, {len(profile.callpaths)} callpaths, "
            f"{len(profile.files)} file(s); times in {unit} per rank, summed over executions")
    where = source if source is not None else "PROFILE"
    tail = (f"Next: tinyprof report {shlex.quote(where)} -o report.html  (call tree, ranks, heatmap, "
            "MPI in a browser; docs/guide.md#analysing-a-profile)")
    return "\n".join([head, *align(table), "", tail])
