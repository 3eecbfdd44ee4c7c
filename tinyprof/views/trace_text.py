"""The critical path and the wait states of a traced profile as text tables
(``tinyprof critical-path``, ``tinyprof wait-states``)."""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

from ..analysis import trace
from ..analysis.profile import Profile
from .text import UNITS, align, printable, shown


def _unit(seconds: float) -> Tuple[str, float]:
    return next(((u, s) for u, s in UNITS if seconds >= s), UNITS[-1])


def _where(callpath: Tuple[str, ...], op: str = "") -> str:
    text = "<".join(map(printable, callpath)) or "(outside every event)"
    return f"{text} [MPI_{op}]" if op else text


def critical_path(profile: Profile, limit: Optional[int] = 20, segments: bool = False) -> str:
    """The path's length against the run's wall time, then the path per
    (rank, callpath), largest first (``segments``: every segment in order)."""
    traced = profile.trace
    path = trace.critical_path(traced)
    scale = trace.SECONDS[traced.unit]
    length, wall = trace.path_length(path), traced.wall_time * scale
    unit, s = _unit(max(length, wall))
    hops = int((path["rank"].diff().fillna(0) != 0).sum())
    head = [f"{shown(profile.name)}: critical path {length / s:.3f} {unit} over {hops + 1} visits to "
            f"{path['rank'].nunique()} of {traced.nranks} ranks; wall time {wall / s:.3f} {unit} "
            f"({100 * length / wall if wall else 100:.2f}%)"]
    table: List[Tuple[str, ...]]
    if segments:
        rows = path if limit is None else path.head(limit)
        table = [(f"start {unit}", f"duration {unit}", "rank", "where")]
        table += [(f"{r.start / s:.3f}", f"{r.duration / s:.3f}", str(r.rank),
                   _where(r.callpath, r.op)) for r in rows.itertuples()]
    else:
        summary = trace.critical_path_summary(traced, path)
        rows = summary if limit is None else summary.head(limit)
        table = [("rank", "callpath", f"on path {unit}", f"in MPI {unit}", "share")]
        table += [(str(r.rank), _where(r.callpath), f"{r.time / s:.3f}", f"{r.mpi / s:.3f}",
                   f"{100 * r.share:.1f}%") for r in rows.itertuples()]
    return "\n".join(head + _left(table, 3 if segments else 1) + _more(len(rows), len(path if
                     segments else summary)))


def wait_states(profile: Profile, limit: Optional[int] = 20) -> str:
    """Waiting time per (callpath, rank), largest first."""
    table: Any = trace.wait_states(profile.trace)
    rows = table if limit is None else table.head(limit)
    unit, s = _unit(float(table["total"].max()) if len(table) else 0.0)
    head = [f"{shown(profile.name)}: waiting in MPI calls, {float(table['total'].sum()) / s:.3f} {unit} "
            f"in all"]
    if not len(table):
        return f"{shown(profile.name)}: no rank waited in an MPI call"
    text = [("callpath", "rank", *(f"{k.replace('_', ' ')} {unit}" for k in trace.WAIT_KINDS),
             f"total {unit}")]
    text += [(_where(r.callpath), str(r.rank), *(f"{getattr(r, k) / s:.3f}" for k in
                                                 trace.WAIT_KINDS), f"{r.total / s:.3f}")
             for r in rows.itertuples()]
    return "\n".join(head + _left(text, 0) + _more(len(rows), len(table)))


def _left(table, column: int) -> list:
    """Aligned lines, ``column`` (the callpath) moved first: left-aligned."""
    order = [column] + [i for i in range(len(table[0])) if i != column]
    return align([[row[i] for i in order] for row in table])


def _more(shown: int, total: int) -> list:
    return [f"... {total - shown} more (--limit 0 shows all)"] if shown < total else []
