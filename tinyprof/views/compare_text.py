"""``tinyprof compare``: the rows of ``tinyprof.compare`` as a text table,
worst first, and the gate's verdict."""
from __future__ import annotations

import math
from typing import Any, List, Optional, Tuple

from .text import UNITS, align, shown

Callpath = Tuple[str, ...]


def table(frame: Any, limit: Optional[int] = None) -> str:
    """Flagged regressions first (largest change first), then the other
    callpaths of both sides by change, then the new and gone ones; ``limit``
    rows at most (None: all)."""
    metric = frame.attrs["metric"]
    timed = metric == "time"
    biggest = max([v for v in (*frame["base"], *frame["new"]) if not math.isnan(v)], default=0.0)
    unit, scale = next(((u, s) for u, s in UNITS if biggest >= s), UNITS[-1]) if timed else ("", 1.0)
    order = sorted(range(len(frame)), key=lambda i: _rank(frame, i))
    mpi = "mpi_time_base" in frame.columns
    head = ("callpath", "status", "base", "new", "change", "p", "flag",
            *(("MPI base", "MPI new", "MPI bytes") if mpi else ()))
    rows: List[Tuple[str, ...]] = [head]
    for i in order[:limit]:
        row = frame.iloc[i]
        flag = "REGRESSED" if row["regressed"] else "improved" if row["improved"] else ""
        cells = [" < ".join(row["callpath"]), row["status"], _number(row["base"] / scale),
                 _number(row["new"] / scale), _percent(row["change"]), _number(row["p_value"], "%.3g"), flag]
        if mpi:
            cells += [_number(row["mpi_time_base"] / scale), _number(row["mpi_time_new"] / scale),
                      _percent(row["mpi_bytes_change"])]
        rows.append(tuple(cells))
    outside = " outside MPI" if frame.attrs["outside_mpi"] else ""
    kind = f"{'inclusive' if frame.attrs['inclusive'] else 'exclusive'} time{outside} in {unit}" if timed \
        else f"metric {shown(metric)}"
    runs = frame.attrs["runs"]
    lines = [f"compare: {runs[0]} base run(s), {runs[1]} new run(s); {kind}, mean over all ranks of "
             f"the run (a rank that did not run a callpath counts 0); evidence: {frame.attrs['test']}",
             *align(rows, right=range(2, len(head)))]
    if limit is not None and len(order) > limit:
        lines.append(f"... {len(order) - limit} more row(s) (--limit 0: all)")
    lines += [f"note: {n}" for n in frame.attrs["notes"]]
    lines.append(f"flagged when p < {frame.attrs['alpha']:g}, |change| > {100 * frame.attrs['threshold']:g}% "
                 f"and |new - base| >= {100 * frame.attrs['floor']:g}% of the base run")
    return "\n".join(lines)


def regressions(frame: Any, above: float) -> List[str]:
    """The flagged regressions whose change exceeds ``above`` percent, worst
    first, each as one printable line."""
    hits = [i for i in sorted(range(len(frame)), key=lambda i: _rank(frame, i))
            if frame["regressed"].iloc[i] and 100 * frame["change"].iloc[i] > above]
    return [f"{shown(' < '.join(frame['callpath'].iloc[i]))}: {_percent(frame['change'].iloc[i])}"
            for i in hits]


def _rank(frame: Any, i: int) -> Tuple[int, float]:
    status, change = frame["status"].iloc[i], frame["change"].iloc[i]
    group = 0 if frame["regressed"].iloc[i] else 1 if status == "both" else 2
    return group, -change if not math.isnan(change) else 0.0


def _number(value: float, spec: str = "%.3f") -> str:
    return "-" if math.isnan(value) else spec % value


def _percent(value: float) -> str:
    if math.isnan(value):
        return "-"
    return "+inf%" if math.isinf(value) else f"{100 * value:+.1f}%"
