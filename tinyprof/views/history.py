"""``tinyprof report R1 R2 ...``: many runs, or the kept snapshots of one run,
as one self-contained HTML page (the history page; docs/guide.md, "History").

The page is built as the one-run report is (``report.render``: plotly.js, the
style and the script inlined, the data as JSON in the page), with its own
script, ``history.js``. The data is compact: the callpaths once (tree order),
then one array per run of each callpath's exclusive time per rank on average
(as ``tinyprof.compare`` measures it; inclusive with ``--inclusive``), and
of its MPI time and bytes when the run recorded them; the page computes the
other of exclusive and inclusive, the diff of any two runs and the
sparklines from them. The regressions are
flagged here, by ``analysis.compare.history``: each run against the one before
it, with ``compare``'s rule.
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..analysis import compare
from ..analysis.profile import Profile, read, read_many, snapshots
from ..format import layout
from ..format.encoding import FormatError
from . import report
from .text import tree_order

Path = Union[str, "os.PathLike[str]"]
MAX_FLAGS = 500         # rows of the regressions table (the worst; the page says how many more)


def runs_in(paths: Sequence[Path]) -> List[str]:
    """The runs named by ``paths``: a directory of runs (one holding run
    output directories, or the files of several profiles) gives each of
    them, in name order; any other path is one run. In a directory of runs,
    a subdirectory holding no profile (``logs/``, ``scripts/``) is no run:
    left out; subdirectories but no run in them is a FormatError."""
    out: List[str] = []
    for path in (os.fspath(p) for p in paths):
        out.extend(_directory_of_runs(path) or [path])
    return out


def _directory_of_runs(path: str) -> Optional[List[str]]:
    """The runs in ``path`` if it is a directory of runs, else None."""
    if not os.path.isdir(path) or os.path.isdir(os.path.join(path, layout.SNAPSHOTS)):
        return None
    entries = sorted(os.listdir(path))
    dirs = [os.path.join(path, e) for e in entries if os.path.isdir(os.path.join(path, e))]
    sets: Dict[Tuple[str, int], str] = {}       # one file per set: read() takes its siblings
    for e in entries:
        m = layout.set_key(e)
        if m is not None:
            sets.setdefault(m, os.path.join(path, e))
    runs = [d for d in dirs if _holds_profile(d)]
    if not runs and len(sets) == 1:
        return None                             # one run's output directory
    runs += sets.values()
    if not runs and dirs:
        raise FormatError(path, None, f"no run in it: none of its {len(dirs)} subdirectories "
                                      f"holds a profile ({layout.SUFFIX} files or {layout.SNAPSHOTS}/)")
    return runs or None                         # empty: read() says so


def _holds_profile(directory: str) -> bool:
    """Whether ``directory`` is a run's output directory: a set file in it, or snapshots."""
    if os.path.isdir(os.path.join(directory, layout.SNAPSHOTS)):
        return True
    try:
        return any(layout.set_key(e) is not None for e in os.listdir(directory))
    except OSError:                             # unreadable: a run, which read() names
        return True


def write(paths: Sequence[Path], output: Path, errors: str = "raise",
          of_snapshots: bool = False, **rule: Any) -> str:
    """Write the history page of the runs at ``paths`` (see :func:`runs_in`;
    ``errors="skip"``: leave out those that cannot be read, with a warning), or
    with ``of_snapshots``, of the kept snapshots of the one run at ``paths[0]``;
    returns its path. ``rule``: :func:`build`'s ``metric``, ``inclusive``,
    ``threshold``, ``floor``, ``alpha``."""
    data = build(*load(paths, errors, of_snapshots), **rule)
    layout.write_atomic(os.fspath(output), report.render(data, "history.js").encode("utf-8"))
    return os.fspath(output)


def load(paths: Sequence[Path], errors: str = "raise", of_snapshots: bool = False
         ) -> Tuple[List[Profile], List[str], bool]:
    """The runs, oldest first (by the run metadata's ``start``, else the
    files' creation time), their labels, and whether they are cumulative
    (the snapshots of one run)."""
    if of_snapshots:
        if len(paths) != 1:
            raise ValueError("the snapshots of one run: give one output directory")
        outdir = os.fspath(paths[0])
        numbers = snapshots(outdir) if os.path.isdir(outdir) else []
        if len(numbers) < 2:
            raise FormatError(outdir, None, f"{len(numbers)} complete snapshot(s): the history of "
                                            "a run needs at least 2, kept with Profiler(keep='all')")
        return [read(outdir, snapshot=k) for k in numbers], [f"snapshot {k}" for k in numbers], True
    names = runs_in(paths)
    if not names:
        raise ValueError("no run given")
    loaded = iter(read_many(names, errors=errors))     # in order, without those skipped
    runs: List[Tuple[Profile, int, str]] = []
    profile = next(loaded, None)
    for i, name in enumerate(names):
        if profile is not None and _holds(name, profile):
            runs.append((profile, i, name))
            profile = next(loaded, None)
    if not runs:
        raise ValueError("no run could be read")
    runs.sort(key=lambda run: (_start(run[0]), run[1]))
    return [p for p, _, _ in runs], _labels([name for _, _, name in runs]), False


def _holds(path: str, profile: Profile) -> bool:
    """Whether ``profile`` was read from ``path`` (a file of it, or a directory above it)."""
    where, first = os.path.abspath(path), os.path.abspath(profile.files[0])
    if os.path.isdir(where):
        return first.startswith(os.path.join(where, ""))
    return where in map(os.path.abspath, profile.files)


def _start(profile: Profile) -> str:
    return str(profile.metadata.get("start") or profile.created)


def _labels(paths: List[str]) -> List[str]:
    """Each run's path without the directories all share."""
    if len(paths) < 2:
        return [os.path.basename(os.path.normpath(p)) or p for p in paths]
    try:
        common = os.path.commonpath([os.path.abspath(p) for p in paths])
    except ValueError:
        return paths
    return [os.path.relpath(os.path.abspath(p), common) for p in paths]


def build(profiles: List[Profile], labels: List[str], cumulative: bool = False,
          metric: str = "time", inclusive: bool = False,
          threshold: float = compare.THRESHOLD, floor: float = compare.FLOOR,
          alpha: float = compare.ALPHA) -> Dict[str, Any]:
    """The page's data: plain lists and numbers (JSON). The values and flags
    as ``tinyprof.compare``'s with these arguments: ``exc`` the exclusive
    values, or with ``inclusive`` (time), ``inc`` the inclusive ones; ``mpi``
    each run's MPI time and bytes per rank per callpath (exclusive or
    inclusive as the values; see ``_mpi``), or null when no run has them."""
    inclusive = inclusive and metric == "time"      # compare sums a custom metric as recorded
    h = compare.history(profiles, metric=metric, inclusive=inclusive, cumulative=cumulative,
                        threshold=threshold, floor=floor, alpha=alpha)
    order = tree_order(h.callpaths)
    column = {path: i for i, path in enumerate(h.callpaths)}
    index = np.array([column[p] for p in order], dtype=np.int64)
    position = {path: i for i, path in enumerate(order)}
    values = h.values[:, index]
    regressed, improved, change = h.regressed[:, index], h.improved[:, index], h.change[:, index]
    steps, paths = np.nonzero(regressed | improved)
    flags = sorted(zip(steps.tolist(), paths.tolist()),
                   key=lambda sp: (not regressed[sp], -abs(change[sp])))
    p_value = h.p_value[:, index]
    shown = np.where(np.isfinite(change), change, np.nan)        # from 0: JSON has no infinity
    names = sorted({p.name for p in profiles})
    return {
        "kind": "snapshots" if cumulative else "runs",
        "name": names[0] if len(names) == 1 else f"{len(names)} applications",
        "runs": labels,
        "nranks": h.nranks,
        "callpaths": [{"name": p[-1], "path": "<".join(p),
                       "parent": position[p[:-1]] if len(p) > 1 else -1} for p in order],
        "inc" if inclusive else "exc": [report.rounded(row) for row in values],
        "mpi": _mpi(h.mpi, index),
        "totals": report.rounded(h.totals),
        "worst": _worst(values, regressed, change),
        "flags": [[s, c, *report.rounded(np.array([shown[s, c], p_value[s, c]])),
                   1 if regressed[s, c] else -1] for s, c in flags[:MAX_FLAGS]],   # change null: from 0
        "flag_counts": [int(regressed.sum()), int(improved.sum())],
        "rule": {"tests": h.tests, "threshold": threshold, "floor": floor, "alpha": alpha,
                 "metric": metric, "inclusive": inclusive},
        "outside_mpi": h.outside_mpi, "notes": h.notes,
        "meta": _metadata(profiles, labels),
    }


def _mpi(mpi: Optional[Dict[str, np.ndarray]], index: np.ndarray) -> Optional[Dict[str, Any]]:
    """Each run's MPI time and bytes per rank (null: the run recorded no MPI
    calls) on the ``columns`` (callpaths in tree order) where any run made
    calls; the other callpaths made none (0 where present)."""
    if mpi is None:
        return None
    series = {key: values[:, index] for key, values in mpi.items()}
    columns = np.flatnonzero(np.any([np.nan_to_num(v) != 0 for v in series.values()], axis=(0, 1)))
    return {"columns": columns.tolist(),
            **{key: [None if np.isnan(row).all() else report.rounded(row[columns]) for row in values]
               for key, values in series.items()}}


def _worst(values: np.ndarray, regressed: np.ndarray, change: np.ndarray) -> List[int]:
    """The callpaths (columns), worst regression first: those flagged, by
    their largest flagged change; then the others, by the change from their
    first to their last value."""
    flagged = np.where(regressed, change, -np.inf).max(axis=0, initial=-np.inf)
    given = ~np.isnan(values)
    columns = np.arange(values.shape[1])
    first = values[given.argmax(axis=0), columns]
    last = values[len(values) - 1 - given[::-1].argmax(axis=0), columns]
    with np.errstate(divide="ignore", invalid="ignore"):
        overall = np.nan_to_num(last / first - 1.0, nan=-np.inf)
    return np.lexsort((-overall, -flagged)).tolist()


# The table's first columns; then every metadata key any run has, in name order.
FIRST_COLUMNS = ("run", "start", "name", "ranks", "created")


def _metadata(profiles: List[Profile], labels: List[str]) -> Dict[str, Any]:
    keys = sorted({k for p in profiles for k in p.metadata} - {"start", "nranks"})
    rows = [[label, str(p.metadata.get("start", "")), p.name, str(p.nranks), p.created,
             *(str(p.metadata.get(k, "")) for k in keys)] for p, label in zip(profiles, labels)]
    return {"columns": [*FIRST_COLUMNS, *keys], "rows": rows}
