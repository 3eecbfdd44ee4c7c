"""A per-callpath summary of a profile across ranks, as a text table
(``tinyprof show`` and the demo)."""
from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, List, Optional, Tuple

import numpy as np

from ..analysis.pop import pop
from ..analysis.profile import Profile
from .pop import efficiency
from .text import UNITS, align, printable, shown, tree_label, tree_order

if TYPE_CHECKING:
    from ..analysis.values import Aggregates


def run_times(profile: Profile, agg: Aggregates) -> np.ndarray:
    """Each rank's recorded run time: the inclusive time of its outermost
    callpaths with values. Those are the roots once they closed; in a snapshot
    taken while a root was still open (at a SIGTERM, say) the root has no
    value yet, and the time is that of the outermost regions that closed."""
    return np.where(outermost(profile, agg), agg.time_inc, 0.0).sum(axis=0)


def outermost(profile: Profile, agg: Aggregates) -> np.ndarray:
    """Per (callpath, rank): whether it has values and no enclosing callpath
    has any on that rank."""
    ran = agg.count > 0
    covered = np.zeros_like(ran)
    out = np.zeros_like(ran)
    row = {path: i for i, path in enumerate(profile.callpaths)}
    for i, path in enumerate(profile.callpaths):         # parents first
        above = covered[row[path[:-1]]] if len(path) > 1 else np.zeros(ran.shape[1], dtype=bool)
        out[i] = ran[i] & ~above
        covered[i] = ran[i] | above
    return out


def run_line(profile: Profile) -> str:
    """The run's line from the run metadata (docs/api.md, "Run metadata"):
    start, ranks and nodes, commit, command, in one printable line cut to a
    terminal's cell; "" when the profile has none of them."""
    m = profile.metadata
    parts = [f"started {m['start']}"] if "start" in m else []
    if "nranks" in m:
        parts.append(f"{m['nranks']} ranks" + (f" on {m['nodes']} node(s)" if "nodes" in m else ""))
    if "git" in m:
        parts.append(f"git {str(m['git'])[:12]}")
    if "command" in m:
        parts.append(f"command: {m['command']}")
    return shown("run: " + ", ".join(parts)) if parts else ""


def summary(profile: Profile, source: Optional[str] = None) -> str:
    """One line per callpath, as a tree, all times in one unit: on how many
    ranks it ran; the min, mean and max across those ranks of each rank's
    inclusive time in it (all executions and occurrences); the mean exclusive
    time; its share of the run (inclusive time summed over ranks, over the
    run's time summed over ranks); its imbalance (max over mean) and slowest
    rank; with MPI capture, its load balance as POP defines it (mean over
    max useful time: time outside MPI calls; docs/pop.md). ``source``, the
    path the profile was read from, goes into the last line, which says
    where to look next."""
    from ..analysis.values import aggregate

    agg = aggregate(profile, "sum")
    balance = None
    if profile.mpi_recorded:
        frame = pop(profile)
        balance = dict(zip(frame["callpath"], frame["load_balance"]))
    ran = agg.count > 0
    first = outermost(profile, agg)
    run_total = float(np.where(first, agg.time_inc, 0.0).sum())
    still_open = sorted({shown(p[0]) for p, row in zip(profile.callpaths, first)
                         if len(p) > 1 and row.any()})
    biggest = float(agg.time_inc.max()) if agg.time_inc.size else 0.0
    unit, scale = next(((u, s) for u, s in UNITS if biggest >= s), UNITS[-1])
    table: List[Tuple[str, ...]] = [("callpath", "ranks", "min", "mean", "max", "excl mean", "% run",
                                      "imbalance", "slowest", *(("LB",) if balance else ()))]
    row_of = {path: i for i, path in enumerate(profile.callpaths)}
    for path in tree_order(profile.callpaths):
        i = row_of[path]
        label = tree_label(path)
        ranks = np.flatnonzero(ran[i])
        if not len(ranks):
            table.append((label, f"0/{profile.nranks}", *["-"] * (8 if balance else 7)))
            continue
        inc, exc = agg.time_inc[i, ranks], agg.time_exc[i, ranks]
        mean = inc.mean()
        table.append((label, f"{len(ranks)}/{profile.nranks}",
                      *(f"{v / scale:.3f}" for v in (inc.min(), mean, inc.max(), exc.mean())),
                      f"{100 * inc.sum() / run_total:.1f}" if run_total else "-",
                      f"{inc.max() / mean:.2f}x" if mean else "-",
                      f"rank {ranks[int(inc.argmax())]}",
                      *((efficiency(balance[path]),) if balance else ())))
    head = (f"{shown(profile.name)}: {profile.nranks} ranks, {len(profile.callpaths)} callpaths, "
            f"{len(profile.files)} file(s); times in {unit} per rank, summed over executions")
    if still_open:
        head += (f"; {', '.join(still_open)} still open when written: % run is of the time "
                 "recorded inside")
    where = printable(shlex.quote(source)) if source is not None else "PROFILE"
    tail = (f"Next: tinyprof report {where} -o report.html  (call tree, ranks, heatmap, "
            "MPI in a browser; docs/guide.md#analysing-a-profile)")
    if balance:
        tail = (f"LB: load balance of the time outside MPI (tinyprof pop {where}: all the POP "
                f"efficiencies; docs/pop.md)\n{tail}")
    run = run_line(profile)      # after the table: the lines above keep their places
    return "\n".join([head, *align(table), "", *([run] if run else []), tail])
