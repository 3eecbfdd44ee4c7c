"""``tinyprof report R1 R2 ...``: many runs, or the kept snapshots of one run,
as one self-contained HTML page (the history page; docs/guide.md, "History").

The page is built as the one-run report is (``report_page.render``: plotly.js, the
style and the script inlined, the data as JSON in the page), with its own
script, ``history.js``. The data is compact: the callpaths once (tree order),
then one array per run of each callpath's exclusive time per rank on average
(as ``tinyprof.compare`` measures it; inclusive with ``--inclusive``), and
of its MPI time and bytes when the run recorded them; the page computes the
other of exclusive and inclusive and the diff of any two runs from them.
Everything judged is ``analysis.compare.series``'s: the flagged changes
(``tinyprof.history``'s table, row for row) and the callpaths' order. Runs
are found by ``format.output_dir.runs_in`` and read by ``analysis.profile.read_runs``.
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np

from ..analysis import compare
from ..analysis.profile import Profile, read_runs
from ..format import output_dir
from . import report_page
from .text import tree_order

Path = Union[str, "os.PathLike[str]"]


def write(paths: Sequence[Path], output: Path, errors: str = "raise",
          of_snapshots: bool = False, **rule: Any) -> str:
    """Write the history page of the runs at ``paths`` (see ``output_dir.runs_in``;
    ``errors="skip"``: leave out those that cannot be read, with a warning), or
    with ``of_snapshots``, of the kept snapshots of the one run at ``paths[0]``;
    returns its path. ``rule``: :func:`build`'s ``metric``, ``inclusive``,
    ``threshold``, ``floor``, ``alpha``."""
    data = build(*read_runs(paths, errors, of_snapshots), **rule)
    output_dir.write_atomic(os.fspath(output), report_page.render(data, "history.js").encode("utf-8"))
    return os.fspath(output)


def build(profiles: List[Profile], labels: List[str], cumulative: bool = False,
          metric: str = "time", inclusive: bool = False,
          threshold: float = compare.THRESHOLD, floor: float = compare.FLOOR,
          alpha: float = compare.ALPHA) -> Dict[str, Any]:
    """The page's data: plain lists and numbers (JSON). The values and flags
    as ``tinyprof.history``'s with these arguments: ``exc`` the exclusive
    values, or with ``inclusive`` (time), ``inc`` the inclusive ones; ``mpi``
    each run's MPI time and bytes per rank per callpath (exclusive or
    inclusive as the values; see ``_mpi``), or null when no run has them;
    ``flags`` the flagged table's rows in its order: run, callpath (index
    here), first run of the baseline, baseline, value, change (null: from 0),
    p-value, 1 regressed or -1 improved."""
    inclusive = inclusive and metric == "time"      # compare sums a custom metric as recorded
    h = compare.series(profiles, labels, cumulative, metric=metric, inclusive=inclusive,
                       threshold=threshold, floor=floor, alpha=alpha)
    order = tree_order(h.callpaths)
    column = {path: i for i, path in enumerate(h.callpaths)}
    index = np.array([column[p] for p in order], dtype=np.int64)
    position = {path: i for i, path in enumerate(order)}
    f = h.flags
    names = sorted({p.name for p in profiles})
    return {
        "kind": "snapshots" if cumulative else "runs",
        "name": names[0] if len(names) == 1 else f"{len(names)} applications",
        "runs": h.labels,
        "nranks": h.nranks,
        "callpaths": [{"name": p[-1], "path": "<".join(p),
                       "parent": position[p[:-1]] if len(p) > 1 else -1} for p in order],
        "inc" if inclusive else "exc": [report_page.rounded(row) for row in h.values[:, index]],
        "mpi": _mpi(h.mpi, index),
        "totals": report_page.rounded(h.totals),
        "worst": [position[h.callpaths[c]] for c in h.worst],
        "flags": [[int(k), position[path], int(since),
                   *report_page.rounded(np.array([base, new, change if np.isfinite(change) else np.nan, p])),
                   1 if regressed else -1]
                  for k, path, since, base, new, change, p, regressed in
                  zip(f["run"], f["callpath"], f["since"], f["base"], f["new"], f["change"], f["p_value"],
                      f["regressed"])],
        "rule": {"test": f.attrs["test"], "threshold": threshold, "floor": floor, "alpha": alpha,
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
            **{key: [None if np.isnan(row).all() else report_page.rounded(row[columns]) for row in values]
               for key, values in series.items()}}


# The table's first columns; then every metadata key any run has, in name order.
FIRST_COLUMNS = ("run", "start", "name", "ranks", "created")


def _metadata(profiles: List[Profile], labels: List[str]) -> Dict[str, Any]:
    keys = sorted({k for p in profiles for k in p.metadata} - {"start", "nranks"})
    rows = [[label, str(p.metadata.get("start", "")), p.name, str(p.nranks), p.created,
             *(str(p.metadata.get(k, "")) for k in keys)] for p, label in zip(profiles, labels)]
    return {"columns": [*FIRST_COLUMNS, *keys], "rows": rows}
