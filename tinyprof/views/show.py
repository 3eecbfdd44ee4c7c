"""A per-callpath summary of a profile across ranks, as a text table
(``tinyprof show`` and the demo)."""
from __future__ import annotations

import math
import shlex
from typing import List, Optional, Tuple

import numpy as np

from ..analysis import values
from ..analysis.profile import Profile
from .pop_text import efficiency
from .text import UNITS, align, printable, shown, tree_label, tree_order


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
    """One line per callpath, as a tree, all times in one unit, the numbers
    of ``analysis.values.summary``: on how many ranks it ran; the min, mean
    and max over all ranks of the run (a rank that did not run it counts 0)
    of each rank's inclusive time in it (all executions and occurrences); the
    mean exclusive time; its share of the run (its mean over the mean run
    time); its imbalance (max over mean) and slowest rank; with MPI capture,
    its load balance as POP defines it (docs/pop.md). ``source``, the path
    the profile was read from, goes into the last line, which says where to
    look next."""
    s = values.summary(profile)
    biggest = float(np.nanmax(s.maximum, initial=0.0))
    unit, scale = next(((u, f) for u, f in UNITS if biggest >= f), UNITS[-1])
    balance = s.load_balance
    table: List[Tuple[str, ...]] = [("callpath", "ranks", "min", "mean", "max", "excl mean", "% run",
                                      "imbalance", "slowest", *(("LB",) if balance is not None else ()))]
    row_of = {path: i for i, path in enumerate(profile.callpaths)}
    for path in tree_order(profile.callpaths):
        i = row_of[path]
        label = tree_label(path)
        if not s.ranks[i]:
            table.append((label, f"0/{profile.nranks}", *["-"] * (8 if balance is not None else 7)))
            continue
        table.append((label, f"{s.ranks[i]}/{profile.nranks}",
                      *(f"{v / scale:.3f}" for v in (s.minimum[i], s.mean[i], s.maximum[i],
                                                     s.exclusive_mean[i])),
                      "-" if math.isnan(s.share[i]) else f"{100 * s.share[i]:.1f}",
                      "-" if math.isnan(s.imbalance[i]) else f"{s.imbalance[i]:.2f}x",
                      f"rank {s.slowest[i]}",
                      *((efficiency(balance[i]),) if balance is not None else ())))
    head = (f"{shown(profile.name)}: {profile.nranks} ranks, {len(profile.callpaths)} callpaths, "
            f"{len(profile.files)} file(s); times in {unit} per rank, summed over executions; "
            f"min, mean, max: over all {profile.nranks} ranks of the run (a rank that did not run "
            "a callpath counts 0; ranks: how many ran it); % run: mean / mean run time")
    if s.open_roots:
        head += (f"; {', '.join(shown(r) for r in s.open_roots)} still open when written: % run is "
                 "of the time recorded inside")
    where = printable(shlex.quote(source)) if source is not None else "PROFILE"
    tail = (f"Next: tinyprof report {where} -o report.html  (call tree, ranks, heatmap, "
            "MPI in a browser; docs/guide.md#analysing-a-profile)")
    if balance is not None:
        tail = (f"LB: load balance of the time outside MPI, POP's: mean over all ranks / max "
                f"(tinyprof pop {where}: all the POP efficiencies; docs/pop.md)\n{tail}")
    run = run_line(profile)      # after the table: the lines above keep their places
    return "\n".join([head, *align(table), "", *([run] if run else []), tail])
