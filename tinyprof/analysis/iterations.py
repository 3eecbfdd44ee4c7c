"""Per-iteration statistics across ranks (the report's iteration plot): for
each callpath, the time of each (execution, iteration) on the ranks that ran
it, reduced to its min, mean and max, in order, binned to a bounded size."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

import numpy as np

from .profile import PER_SECOND, Profile
from .values import occurrences


@dataclass
class IterationStats:
    """One callpath's points, in order of (execution, iteration); a point is
    a bin of consecutive (execution, iteration)s when there are more than
    the bound."""

    occurrence: np.ndarray          # int64: the index of the bin's first (execution, iteration)
    execution: np.ndarray           # int64: ... its execution
    iteration: np.ndarray           # int64: ... and iteration (occurrence in the execution)
    min: np.ndarray                 # float64 s: the least time of a rank in the bin
    mean: np.ndarray                # float64 s: the mean over the bin of the mean over the ranks that ran
    max: np.ndarray                 # float64 s: the largest time of a rank in the bin
    binned: bool                    # some point stands for several (execution, iteration)s


def per_iteration(profile: Profile, max_points: int) -> Dict[int, IterationStats]:
    """Per callpath (its index in ``profile.callpaths``) with at least two
    (execution, iteration)s that ran on some rank: the min, mean and max
    across the ranks that ran each, binned evenly to at most ``max_points``
    points (a bin keeps its least min, the mean of its means and its largest
    max)."""
    occ = occurrences(profile)          # ordered by callpath, rank, execution, iteration
    order = np.lexsort((occ.iteration, occ.execution, occ.callpath))
    path, execution = occ.callpath[order], occ.execution[order]
    iteration, times = occ.iteration[order], occ.time_ns[order].astype(np.float64)
    if not len(times):
        return {}
    new = np.concatenate([[True], (path[1:] != path[:-1]) | (execution[1:] != execution[:-1])
                          | (iteration[1:] != iteration[:-1])])
    starts = np.flatnonzero(new)        # one per (callpath, execution, iteration)
    lo, hi = np.minimum.reduceat(times, starts), np.maximum.reduceat(times, starts)
    mean = np.add.reduceat(times, starts) / np.diff(np.append(starts, len(times)))
    owner = path[starts]
    bounds = np.flatnonzero(np.concatenate([[True], owner[1:] != owner[:-1], [True]]))
    scale = PER_SECOND[profile.unit]
    out: Dict[int, IterationStats] = {}
    for a, b in zip(bounds[:-1], bounds[1:]):
        n = b - a
        if n < 2:
            continue
        edges = np.unique(np.linspace(0, n, min(n, max_points) + 1).astype(np.int64))[:-1]
        sizes = np.diff(np.append(edges, n))
        at = starts[a + edges]
        out[int(owner[a])] = IterationStats(
            edges, execution[at].astype(np.int64), iteration[at].astype(np.int64),
            np.minimum.reduceat(lo[a:b], edges) / scale,
            np.add.reduceat(mean[a:b], edges) / sizes / scale,
            np.maximum.reduceat(hi[a:b], edges) / scale, bool((sizes > 1).any()))
    return out
