"""Two sets of runs compared per callpath: what changed, and whether it is
more than noise (``tinyprof.compare``, ``tinyprof compare``; docs/api.md).

Each side is one or several runs. A run gives, per callpath, one value per
(rank, execution): its exclusive (or inclusive) time there, or the sum of a
custom metric. The row's ``base`` and ``new`` are per rank on average; the
test that backs the flags takes the runs as samples (each its value per rank
on average): Welch's when both sides have several, the single run against
the other side's run-to-run noise when one has; one run a side flags
nothing. ``history`` judges a series of runs by the noise seen over it.
Why these choices: docs/api.md, "compare", and docs/guide.md.
"""
from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import excerpt
from . import sums
from .profile import PER_SECOND, Profile, read_many, read_runs
from .sums import parent_rows
from .values import mpi_per_node, occurrences

Callpath = Tuple[str, ...]
Runs = Union[Profile, str, "os.PathLike[str]", Sequence[Union[Profile, str, "os.PathLike[str]"]]]

# The rule's defaults (compare, history, tinyprof compare and report): a change
# beyond 5%, at least 1% of the base run's time, significant at 5%.
THRESHOLD, FLOOR, ALPHA = 0.05, 0.01, 0.05


@dataclass
class _Run:
    """One run's values on the union's callpaths."""

    nranks: int
    slots: np.ndarray                  # (rank, execution) of each column, shape (S, 2)
    values: np.ndarray                 # (len(union), S) float64
    present: np.ndarray                # (len(union),) bool: the callpath is in this run
    total: float                       # the run's size per rank (all exclusive values)
    mpi: Optional[Dict[str, np.ndarray]]   # "time", "bytes": per rank mean per union row (if recorded)


def compare(base: Runs, new: Runs, metric: str = "time", inclusive: bool = False,
            threshold: float = THRESHOLD, floor: float = FLOOR, alpha: float = ALPHA) -> Any:
    """Compare the runs ``new`` against ``base`` per callpath.

    ``base`` and ``new`` are each a profile (a ``Profile`` or a path) or a
    list of them (repeated runs). Returns a pandas DataFrame, one row per
    callpath of either side (parents first): ``callpath``, ``status``
    (``"both"``, ``"new"``: only in ``new``, ``"gone"``: only in ``base``),
    ``base`` and ``new`` (per rank on average, over the runs of the side;
    seconds for ``metric="time"``), ``change`` (new / base - 1), ``p_value``
    (of the test named in ``frame.attrs["test"]``, over runs; NaN when no
    test is possible: one run a side), ``regressed`` and ``improved``.
    A row is flagged only when the change is significant (``p_value <
    alpha``: never without a test), beyond ``threshold`` (relative)
    and its size, ``|new - base|``, at least ``floor`` of the base side's
    run (the sum of all callpaths' exclusive values per rank).

    ``metric``: ``"time"`` (exclusive by default, ``inclusive=True`` for
    inclusive) or an inconsistent custom metric (summed per rank). When
    every run recorded MPI calls, ``base`` and ``new`` are the time outside
    MPI calls (waits are the symptom of a slower rank or a busy machine, not
    where the time went), and the MPI calls are compared apart, unflagged:
    ``mpi_time_base``, ``mpi_time_new``, ``mpi_bytes_base``,
    ``mpi_bytes_new`` (per rank, exclusive or inclusive as the times) and
    their ``mpi_time_change``, ``mpi_bytes_change``.
    ``frame.attrs["notes"]`` says what the reader must know (one run a
    side: no evidence; different rank counts: values per rank on average).
    """
    import pandas as pd

    _check_rule(threshold, floor, alpha)
    sides = [_profiles(base, "base"), _profiles(new, "new")]
    paths, with_mpi, flat = _on_union(sides[0] + sides[1], metric, inclusive)
    runs = [flat[:len(sides[0])], flat[len(sides[0]):]]
    j = _judge(runs, threshold, floor, alpha)
    both = j.present[0] & j.present[1]
    frame = pd.DataFrame({
        "callpath": pd.Series(paths, dtype=object),
        "status": np.where(both, "both", np.where(j.present[0], "gone", "new")),
        "base": np.where(j.present[0], j.mean[0], np.nan), "new": np.where(j.present[1], j.mean[1], np.nan),
        "change": j.change, "p_value": np.where(both, j.p_value, np.nan),
        "regressed": j.regressed, "improved": j.improved})
    if with_mpi:
        for key in ("time", "bytes"):
            values = [np.mean([r.mpi[key] for r in side if r.mpi is not None], axis=0) for side in runs]
            frame[f"mpi_{key}_base"], frame[f"mpi_{key}_new"] = values
            with np.errstate(divide="ignore", invalid="ignore"):
                frame[f"mpi_{key}_change"] = values[1] / values[0] - 1.0
    ranks = [sorted({r.nranks for r in side}) for side in runs]
    notes = [ONE_A_SIDE] if len(runs[0]) == len(runs[1]) == 1 else []
    if ranks[0] != ranks[1] or len(ranks[0]) > 1:
        notes.append(f"rank counts differ (base {_counts(ranks[0])}, new {_counts(ranks[1])}): "
                     "values are per rank on average")
    frame.attrs.update(test=j.test, notes=notes, metric=metric, inclusive=inclusive,
                       outside_mpi=with_mpi and metric == "time", runs=(len(runs[0]), len(runs[1])),
                       threshold=threshold, floor=floor, alpha=alpha)
    return frame


def _check_rule(threshold: float, floor: float, alpha: float) -> None:
    if not 0 <= threshold or not 0 <= floor or not 0 < alpha < 1:
        raise ValueError("threshold and floor must be >= 0 and alpha in (0, 1)")


def _on_union(profiles: Sequence[Profile], metric: str, inclusive: bool
              ) -> Tuple[List[Callpath], bool, List[_Run]]:
    """The union of the profiles' callpaths (in order of first appearance),
    whether every one recorded MPI calls, and each one's ``_Run`` on it."""
    for p in profiles:
        _check_metric(p, metric)
    union: Dict[Callpath, int] = {}
    for p in profiles:
        for path in p.callpaths:
            union.setdefault(tuple(path), len(union))
    with_mpi = all(p.mpi_recorded for p in profiles)
    return list(union), with_mpi, [_run(p, union, metric, inclusive, with_mpi) for p in profiles]


# Runs of a callpath needed to see its run-to-run noise: 3 differences at one lag.
MIN_DIFFERENCES = 3
HISTORY_TEST = ("each run against the runs since the callpath's last change, by the run-to-run noise "
                "seen over the series (t)")


@dataclass
class History:
    """Runs in order on one union of callpaths, and the changes flagged
    over them (``series``; ``flags`` is what ``history`` returns)."""

    callpaths: List[Callpath]
    labels: List[str]
    values: np.ndarray          # (runs, callpaths): per rank on average, NaN where absent
    totals: np.ndarray          # (runs,): each run's size per rank (what the floor is a share of)
    nranks: List[int]
    noise: np.ndarray           # (callpaths,): run-to-run standard deviation seen, NaN: too few runs
    flags: Any                  # the flagged table (a DataFrame, see ``history``)
    worst: List[int]            # callpaths (columns), worst regression first
    outside_mpi: bool           # times are outside MPI calls (every run recorded them)
    notes: List[str]
    mpi: Optional[Dict[str, np.ndarray]]    # "time", "bytes": (runs, callpaths) per rank on
    #                             average, as the values (exclusive or inclusive); NaN for the
    #                             runs without MPI data (or where absent); None when no run has it


def history(runs: Runs, metric: str = "time", inclusive: bool = False, snapshots: bool = False,
            errors: str = "raise", threshold: float = THRESHOLD, floor: float = FLOOR,
            alpha: float = ALPHA) -> Any:
    """The changes over a history of runs, per callpath, as the history page
    (``tinyprof report R1 R2 ...``) flags them.

    ``runs``: profiles or paths, each a run or a directory of runs, taken
    oldest first (by the run metadata's ``start``); with ``snapshots``, one
    output directory whose kept snapshots are the history, each as its
    interval since the one before. ``errors="skip"`` leaves out the runs that
    cannot be read (``read_many``). Values as ``compare``'s (``metric``,
    ``inclusive``, outside MPI calls when every run recorded them).

    Each run is judged against its baseline, the runs since the callpath's
    last flagged change (all runs before it, until one is flagged), by the
    run-to-run noise seen over the whole series: the spread of the
    differences between runs one apart, or two apart (a series alternating
    between two versions), whichever is smaller, robustly (median absolute
    deviation, so that the changes themselves do not count as noise; a steady
    drift neither). Flagged: p < ``alpha`` (t with the differences' degrees of
    freedom), the change beyond ``threshold`` and ``|new - base|`` at least
    ``floor`` of the baseline's run time. A callpath seen in fewer than 4
    runs is never flagged. A flag starts a new baseline.

    Returns a pandas DataFrame, one row per flagged change, regressions
    first, largest change first: ``run`` (its position, oldest 0), ``label``,
    ``callpath``, ``since`` (the first run of the baseline), ``base`` (the
    baseline's mean), ``new``, ``change`` (new / base - 1; inf from 0),
    ``p_value``, ``regressed``, ``improved``. ``frame.attrs``: ``runs`` (the
    labels in order), ``test``, ``notes``, ``metric``, ``inclusive``,
    ``outside_mpi``, ``threshold``, ``floor``, ``alpha``."""
    items = [runs] if isinstance(runs, (Profile, str, os.PathLike)) else list(runs)
    profiles, labels, cumulative = read_runs(items, errors, snapshots)
    return series(profiles, labels, cumulative, metric, inclusive, threshold, floor, alpha).flags


def series(profiles: Sequence[Profile], labels: Sequence[str], cumulative: bool = False,
           metric: str = "time", inclusive: bool = False, threshold: float = THRESHOLD,
           floor: float = FLOOR, alpha: float = ALPHA) -> History:
    """The runs ``profiles`` (oldest first, named ``labels``) per callpath,
    with the changes ``history`` flags over them, and each run's MPI time
    and bytes per callpath when it recorded them. ``cumulative=True``: the
    profiles are the snapshots of one run, each holding all before it: each
    is taken as its interval since the one before (the first: since the
    start), per rank."""
    import pandas as pd

    if not profiles:
        raise ValueError("history: no profile given")
    _check_rule(threshold, floor, alpha)
    paths, with_mpi, runs = _on_union(profiles, metric, inclusive)
    if cumulative:
        runs = _intervals(runs)
    values = np.array([r.values.sum(axis=1) / r.nranks for r in runs]).reshape(len(runs), len(paths))
    values[~np.array([r.present for r in runs]).reshape(values.shape)] = np.nan
    totals = np.array([r.total for r in runs])
    noise, df = _noise(values)
    found = _changes(values, totals, noise, df, threshold, floor, alpha)
    order = sorted(range(len(found)), key=lambda i: (not found[i][6] > 0, -abs(found[i][5]), found[i][0]))
    rows = [found[i] for i in order]
    flags = pd.DataFrame({
        "run": pd.Series([r[0] for r in rows], dtype=np.int64),
        "label": pd.Series([labels[r[0]] for r in rows], dtype=object),
        "callpath": pd.Series([paths[r[1]] for r in rows], dtype=object),
        "since": pd.Series([r[2] for r in rows], dtype=np.int64),
        **{key: pd.Series([r[i] for r in rows], dtype=np.float64)
           for i, key in ((3, "base"), (4, "new"), (5, "change"), (7, "p_value"))},
        "regressed": pd.Series([r[6] > 0 for r in rows], dtype=bool),
        "improved": pd.Series([r[6] < 0 for r in rows], dtype=bool)})
    nranks = [r.nranks for r in runs]
    notes = [f"rank counts differ ({_counts(sorted(set(nranks)))}): values are per rank on average"] \
        if len(set(nranks)) > 1 else []
    if len(runs) <= MIN_DIFFERENCES:
        notes.append(f"{len(runs)} {'intervals' if cumulative else 'runs'}: too few to see the run-to-run "
                     f"noise (it takes {MIN_DIFFERENCES + 1}): nothing flagged")
    flags.attrs.update(runs=list(labels), test=HISTORY_TEST, notes=notes, metric=metric, inclusive=inclusive,
                       outside_mpi=with_mpi and metric == "time", threshold=threshold, floor=floor,
                       alpha=alpha)
    mpi = None
    if any(r.mpi is not None for r in runs):
        mpi = {key: np.array([np.full(len(paths), np.nan) if r.mpi is None else
                              np.where(r.present, r.mpi[key], np.nan) for r in runs])
               for key in ("time", "bytes")}
    return History(paths, list(labels), values, totals, nranks, noise, flags, _worst(values, flags, paths),
                   with_mpi and metric == "time", notes, mpi)


def _noise(values: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Per callpath (column of ``values``, runs in rows, NaN: absent), the
    run-to-run standard deviation seen over the series and its degrees of
    freedom (NaN and 0: too few runs): of the differences between the runs
    where it is present, one apart and two apart, the smaller spread, each
    as 1.4826 times the median absolute deviation from their median, over
    sqrt(2) (a difference holds two runs' noise)."""
    sigma, df = np.full(values.shape[1], np.nan), np.zeros(values.shape[1])
    for j in range(values.shape[1]):
        x = values[:, j][~np.isnan(values[:, j])]
        for lag in (1, 2):
            d = x[lag:] - x[:-lag]
            if len(d) >= MIN_DIFFERENCES:
                spread = 1.4826 * float(np.median(np.abs(d - np.median(d)))) / math.sqrt(2)
                if not spread >= sigma[j]:          # NaN: the first
                    sigma[j], df[j] = spread, len(d) - 1
    return sigma, df


Change = Tuple[int, int, int, float, float, float, float, float]


def _changes(values: np.ndarray, totals: np.ndarray, noise: np.ndarray, df: np.ndarray,
             threshold: float, floor: float, alpha: float) -> List[Change]:
    """The flagged changes: (run, callpath, first run of the baseline, the
    baseline's mean, the run's value, change, sign, p-value), each run judged
    against the runs since the callpath's last flagged change (``history``)."""
    count, total, size = (np.zeros(values.shape[1]) for _ in range(3))
    since = np.zeros(values.shape[1], dtype=np.int64)
    out = []
    for k, x in enumerate(values):
        here = ~np.isnan(x)
        judged = here & (count > 0)
        n = np.maximum(count, 1)
        base = total / n
        diff = np.where(judged, x - base, 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            change = np.where(judged, x / base - 1.0, np.nan)
        wanted = judged & (np.abs(change) > threshold) & (np.abs(diff) >= floor * size / n) & ~np.isnan(noise)
        flagged = np.zeros_like(here)
        if wanted.any():
            p = _t_columns(diff, noise * np.sqrt(1 + 1 / n), df, wanted, alpha)
            flagged = wanted & (p < alpha)
            out += [(k, j, int(since[j]), float(base[j]), float(x[j]), float(change[j]),
                     float(np.sign(diff[j])), float(p[j])) for j in np.flatnonzero(flagged).tolist()]
        start = flagged | (here & (count == 0))
        since = np.where(start, k, since)
        kept = here & ~start
        count = np.where(start, 1, count + kept)
        total = np.where(start, np.nan_to_num(x), total + np.where(kept, x, 0.0))
        size = np.where(start, totals[k], size + np.where(kept, totals[k], 0.0))
    return out


def _worst(values: np.ndarray, flags: Any, paths: List[Callpath]) -> List[int]:
    """The callpaths (columns), worst regression first: those flagged, by
    their largest flagged change; then the others, by the change from their
    first to their last value."""
    column = {p: i for i, p in enumerate(paths)}
    flagged = np.full(values.shape[1], -np.inf)
    regressed = flags[flags["regressed"]]
    for path, change in zip(regressed["callpath"], regressed["change"]):
        flagged[column[path]] = max(flagged[column[path]], change)
    given = ~np.isnan(values)
    columns = np.arange(values.shape[1])
    first = values[given.argmax(axis=0), columns]
    last = values[len(values) - 1 - given[::-1].argmax(axis=0), columns]
    with np.errstate(divide="ignore", invalid="ignore"):
        overall = np.nan_to_num(last / first - 1.0, nan=-np.inf)
    return np.lexsort((-overall, -flagged)).tolist()


def _intervals(runs: List[_Run]) -> List[_Run]:
    """Cumulative runs (snapshots of one run) as what each added to the one
    before, per rank: executions continue across snapshots, ranks stay."""
    out: List[_Run] = []
    before: Optional[_Run] = None
    for r in runs:
        per_rank = np.zeros((len(r.values), r.nranks))
        np.add.at(per_rank.T, r.slots[:, 0], r.values.T)
        slots = np.stack([np.arange(r.nranks), np.zeros(r.nranks, np.int64)], axis=1)
        now = _Run(r.nranks, slots, per_rank, r.present, r.total, r.mpi)
        if before is None:
            out.append(now)
        elif before.nranks != now.nranks:
            raise ValueError(f"snapshots of {before.nranks} and {now.nranks} ranks: not one run")
        else:
            mpi = None if now.mpi is None or before.mpi is None else \
                {k: now.mpi[k] - before.mpi[k] for k in now.mpi}
            out.append(_Run(now.nranks, slots, now.values - before.values, now.present,
                            now.total - before.total, mpi))
        before = now
    return out


@dataclass
class _Judged:
    """Per callpath of the union: each side's mean per rank and presence, the
    change, the p-value of ``test`` and the flags."""

    mean: List[np.ndarray]
    present: List[np.ndarray]
    change: np.ndarray
    p_value: np.ndarray
    regressed: np.ndarray
    improved: np.ndarray
    test: str


def _judge(runs: List[List[_Run]], threshold: float, floor: float, alpha: float,
           every_p: bool = True) -> _Judged:
    """The rule of ``compare`` on two sides of runs of one union of callpaths.
    ``every_p=False``: the exact p-value only where a row is flagged (where
    it is needed, fast: see ``_t_columns``); unflagged rows' are not p-values."""
    mean = [np.mean([r.values.sum(axis=1) / r.nranks for r in side], axis=0) for side in runs]
    present = [np.any([r.present for r in side], axis=0) for side in runs]
    with np.errstate(divide="ignore", invalid="ignore"):
        change = mean[1] / mean[0] - 1.0
    both = present[0] & present[1]
    change[~both] = np.nan
    total = np.mean([r.total for r in runs[0]])
    big = np.abs(mean[1] - mean[0]) >= floor * total
    p_value, test = (_evidence(runs) if every_p else
                     _evidence(runs, both & big & (np.abs(change) > threshold), alpha))
    significant = p_value < alpha               # NaN: no test possible, no evidence
    flagged = both & significant & big
    return _Judged(mean, present, change, p_value, flagged & (change > threshold),
                   flagged & (change < -threshold), test)


def _profiles(side: Runs, name: str) -> List[Profile]:
    items = [side] if isinstance(side, (Profile, str, os.PathLike)) else list(side)
    if not items:
        raise ValueError(f"compare: no {name} profile given")
    paths = [p for p in items if not isinstance(p, Profile)]
    loaded = iter(read_many(paths))         # in threads: many runs read at once
    return [p if isinstance(p, Profile) else next(loaded) for p in items]


def _check_metric(profile: Profile, metric: str) -> None:
    if metric == "time":
        return
    kinds = dict(profile.metrics)
    if kinds.get(metric) is not False:
        have = [k for k, c in profile.metrics if not c]
        raise ValueError(f"profile {excerpt(profile.name)} ({excerpt(profile.files[0])}): no "
                         f"per-occurrence metric {excerpt(metric)} to compare "
                         f"(it has: {excerpt(', '.join(['time', *have]))})")


def _run(profile: Profile, union: Dict[Callpath, int], metric: str, inclusive: bool,
         with_mpi: bool) -> _Run:
    """Per callpath of ``union``, the run's value on each (rank, execution) with
    values; with MPI time subtracted (``with_mpi`` and time), on each rank;
    its MPI time and bytes when it recorded them."""
    occ = occurrences(profile)
    slot_key = occ.rank.astype(np.int64) << 32 | occ.execution.astype(np.int64)
    keys, slot = np.unique(slot_key, return_inverse=True)
    local: np.ndarray = np.zeros((len(profile.callpaths), len(keys)),
                                 dtype=np.int64 if metric == "time" else np.float64)
    given = occ.time_ns if metric == "time" else np.nan_to_num(occ.metrics[metric])
    np.add.at(local, (occ.callpath, slot), given)
    scale = PER_SECOND[profile.unit] if metric == "time" else 1.0
    total = float(local.sum()) / scale / profile.nranks
    if metric == "time":
        parent = parent_rows(profile.callpaths)
        total = float(local[parent < 0].sum()) / scale / profile.nranks   # the roots: all exclusive time
        if not inclusive:
            child = np.flatnonzero(parent >= 0)
            children = np.zeros_like(local)
            np.add.at(children, parent[child], local[child])
            local = local - children       # integral ns: exact before the one division
    rows = np.array([union[tuple(p)] for p in profile.callpaths], dtype=np.int64)
    slots = np.stack([keys >> 32, keys & 0xFFFFFFFF], axis=1)
    values = np.zeros((len(union), len(keys)))
    values[rows] = local / scale
    present = np.zeros(len(union), dtype=bool)
    present[rows] = True
    mpi = None
    if profile.mpi_recorded:
        per_node = mpi_per_node(profile)
        suffix = " (inc)" if inclusive else ""
        mpi = {}
        for key in ("time", "bytes"):
            mpi[key] = np.zeros(len(union))
            mpi[key][rows] = per_node[key + suffix].sum(axis=1) / profile.nranks
        if with_mpi and metric == "time":
            # MPI time is known per rank, not per execution: one sample per rank, outside
            # MPI. A callpath with no time of its own (an MPI call site, docs/mpi.md) waits
            # inside its nearest timed ancestor: its MPI time comes out of that one's (out of
            # none at the top: a site outside every event has no time to take it from).
            timed = np.zeros((len(profile.callpaths), profile.nranks), dtype=bool)
            timed[occ.callpath, occ.rank] = True
            waited = per_node["time"].copy()
            for i in range(len(parent) - 1, -1, -1):          # children before their parents
                if parent[i] >= 0:
                    moved = np.where(timed[i], 0.0, waited[i])
                    waited[parent[i]] += moved
                    waited[i] -= moved
            waited[~timed] = 0
            per_rank = np.zeros((len(union), profile.nranks))
            np.add.at(per_rank.T, slots[:, 0], values.T)
            per_rank[rows] -= sums.inclusive(waited, parent) if inclusive else waited
            slots = np.stack([np.arange(profile.nranks), np.zeros(profile.nranks, np.int64)], axis=1)
            values = per_rank
    return _Run(profile.nranks, slots, values, present, total, mpi)


# Why one run a side is no evidence, in compare's notes and the gate's verdict.
ONE_A_SIDE = ("one run a side cannot tell a change from run-to-run noise (a run on a busier machine "
              "is slower on every rank): nothing flagged; give several runs on a side "
              "(--base A B C --new D E F)")


def _evidence(runs: List[List[_Run]], wanted: Optional[np.ndarray] = None,
              alpha: Optional[float] = None) -> Tuple[np.ndarray, str]:
    """Per callpath (``wanted`` ones: NaN elsewhere), the two-sided p-value
    that the sides' means differ (with ``alpha``: exact only below it, see
    ``_t_columns``), and the test's name. The samples are runs, each its
    value per rank on average: the ranks of one run are no evidence, as a
    whole run is slower or faster on every rank at once. Several runs on one
    side only: the single run against that side's run-to-run noise (a t
    prediction interval); one run a side: no test (NaN)."""
    base, new = [np.array([r.values.sum(axis=1) / r.nranks for r in side]) for side in runs]
    if len(base) >= 2 and len(new) >= 2:
        return _welch(base, new, wanted, alpha), f"Welch's t-test over runs ({len(base)} vs {len(new)})"
    if len(base) == len(new) == 1:
        return np.full(base.shape[1], np.nan), "none: one run a side"
    many, name = (base, ("new", "base")) if len(new) == 1 else (new, ("base", "new"))
    return _predicted(new.mean(axis=0) - base.mean(axis=0), many, wanted, alpha), \
        f"the 1 {name[0]} run against the {len(many)} {name[1]} runs' noise (t, {len(many) - 1} df)"


def _predicted(diff: np.ndarray, many: np.ndarray, wanted: Optional[np.ndarray] = None,
               alpha: Optional[float] = None) -> np.ndarray:
    """p-values that one more run, ``diff`` away from the mean of the runs
    ``many`` (per column), comes from them: over their spread, sqrt(1 + 1/n)
    standard deviations for one more value."""
    n = len(many)
    se = many.std(axis=0, ddof=1) * math.sqrt(1 + 1 / n)
    return _t_columns(diff, se, np.full(len(diff), n - 1.0), wanted, alpha)


def _welch(a: np.ndarray, b: np.ndarray, wanted: Optional[np.ndarray] = None,
           alpha: Optional[float] = None) -> np.ndarray:
    """p-values of Welch's t-test between each column of ``a`` and of ``b``."""
    if len(a) < 2 or len(b) < 2:
        return np.full(a.shape[1], np.nan)
    va, vb = a.var(axis=0, ddof=1) / len(a), b.var(axis=0, ddof=1) / len(b)
    se = np.sqrt(va + vb)
    with np.errstate(divide="ignore", invalid="ignore"):
        df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    return _t_columns(b.mean(axis=0) - a.mean(axis=0), se, df, wanted, alpha)


def _t_columns(diff: np.ndarray, se: np.ndarray, df: np.ndarray, wanted: Optional[np.ndarray],
               alpha: Optional[float] = None) -> np.ndarray:
    """``_t_two_sided`` of each column (of the ``wanted`` ones; NaN elsewhere).
    With ``alpha``, the exact p-value only where it is below ``alpha``, ``alpha``
    itself elsewhere: decided against the critical value, the same for every
    column of one degree of freedom (as a paired test's)."""
    out = np.full(len(diff), np.nan)
    rows = np.arange(len(diff)) if wanted is None else np.flatnonzero(wanted)
    if alpha is not None and len(np.unique(df[rows])) <= 4:
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.abs(diff[rows] / se[rows])
        critical = np.array([_t_critical(f, alpha) for f in df[rows].tolist()])
        beyond = ~(t <= critical)            # no spread (t NaN or inf): the exact rule decides
        out[rows[~beyond]] = alpha
        rows = rows[beyond]
    out[rows] = [_t_two_sided(d, s, f) for d, s, f in
                 zip(diff[rows].tolist(), se[rows].tolist(), df[rows].tolist())]
    return out


@functools.lru_cache(maxsize=64)
def _t_critical(df: float, alpha: float) -> float:
    """The |t| whose two-sided p-value is ``alpha`` (bisection: p falls as |t| grows)."""
    lo, hi = 0.0, 1.0
    while _t_two_sided(hi, 1.0, df) > alpha:
        lo, hi = hi, 2 * hi
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _t_two_sided(mid, 1.0, df) > alpha else (lo, mid)
    return lo


def _t_two_sided(diff: float, se: float, df: float) -> float:
    """P(|T| >= |diff / se|) for Student's t with ``df`` degrees of freedom.
    No spread at all (identical values on each side, as deterministic
    regions give): 1 when the means are equal, else 0."""
    if not se > 0 or not math.isfinite(df):
        return 1.0 if diff == 0 else 0.0
    t = diff / se
    return _betainc(df / 2, 0.5, df / (df + t * t))


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued
    fraction (modified Lentz), on the side where it converges fast."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _betainc(b, a, 1 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x))
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return front * h / a


def _counts(counts: List[int]) -> str:
    return "/".join(str(c) for c in counts) + " ranks"
