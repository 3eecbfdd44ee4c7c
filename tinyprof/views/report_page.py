"""``tinyprof report``: a profile as one self-contained HTML file.

The page holds the profile's numbers as JSON, its own script and style
(``report.js``, ``report.css``) and plotly.js, inlined from the ``plotly``
package (the ``tinyprof[report]`` extra): it fetches nothing, so it works
offline, from a mail attachment or a cluster's file system. Plotly because it
is maintained, inlines into one file, and draws what we need (heatmaps of
200 x 1,024 cells, box and bar plots, lines with bands) with hover, zoom and
export built in; its size (4.8 MB) is the price of one file with no network.

The numbers are computed in ``analysis/`` at report time and laid out here,
so that the page only draws: per-(callpath, rank) aggregates, per-iteration
statistics across ranks (binned to at most ``MAX_POINTS`` per callpath), the
snapshots' time series, the MPI tables and the trace analyses when the
profile has them.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..analysis import pop, snapshot_intervals, values
from ..analysis.iterations import per_iteration
from ..analysis.profile import PER_SECOND, Profile, read, snapshots
from ..analysis.values import aggregate, mpi_per_node, run_times
from ..format import output_dir
from .show import run_line
from .text import tree_order

MAX_POINTS = 400        # per callpath in the iteration plot
MAX_SNAPSHOTS = 200     # snapshots read for the time series (evenly sampled)
TOP_SNAPSHOT_PATHS = 8  # callpaths drawn apart over time; the rest is "other"
TOP_ROWS = 40           # rows of the MPI, critical-path and wait-state tables
_HERE = os.path.dirname(os.path.abspath(__file__))


# The JSON goes inside a <script> element: no "</script", "<!--" or "-->" may
# appear in it, whatever the names, and U+2028/9 end a line in old parsers.
# As JSON escapes these characters mean the same; JSON.parse gets the names back.
_SCRIPT_SAFE = {ord(c): f"\\u{ord(c):04x}" for c in "<>&\u2028\u2029"}


class ReportError(Exception):
    """The report cannot be made (plotly is not installed)."""


def write(profile_or_path: Union[Profile, str, os.PathLike[str]],
          output: Union[str, os.PathLike[str]]) -> str:
    """Write the HTML report of a profile (or of the profile at a path) to
    ``output``; returns its path. With a path to an output directory whose
    snapshots were all kept (``keep="all"``), the report also shows them over time."""
    if isinstance(profile_or_path, Profile):
        profile, source = profile_or_path, None
    else:
        source = os.fspath(profile_or_path)
        profile = read(source)
    output_dir.write_atomic(os.fspath(output), render(build(profile, source)).encode("utf-8"))
    return os.fspath(output)


def plotly_js() -> str:
    """plotly.min.js from the installed ``plotly`` package, read as a file:
    importing plotly would load its dependencies for nothing."""
    import importlib.util

    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        raise ReportError("the report needs plotly: pip install 'tinyprof[report]' (or plotly)")
    path = os.path.join(next(iter(spec.submodule_search_locations)), "package_data", "plotly.min.js")
    with open(path, encoding="utf-8") as f:
        return f.read()


def render(data: Dict[str, Any], script: str = "report.js") -> str:
    """The HTML page of ``build``'s data (``script``: the page's script,
    ``history.js`` for ``views.history_page``'s data); its title names ``data["name"]``."""
    def asset(name: str) -> str:
        with open(os.path.join(_HERE, name), encoding="utf-8") as f:
            return f.read()

    payload = json.dumps(data, separators=(",", ":"), allow_nan=False).translate(_SCRIPT_SAFE)
    title = f"tinyprof report: {data['name']}".replace("&", "&amp;").replace("<", "&lt;")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{title}</title><style>{asset('report.css')}</style>"
            f"<script>{plotly_js()}</script></head>\n<body>"
            f'<script type="application/json" id="tinyprof-data">{payload}</script>\n'
            f"<script>{asset('common.js')}{asset(script)}</script></body></html>\n")


def build(profile: Profile, source: Optional[str] = None) -> Dict[str, Any]:
    """The report's data: plain lists and numbers (JSON)."""
    order = tree_order(profile.callpaths)
    row = {path: i for i, path in enumerate(profile.callpaths)}
    index = np.array([row[p] for p in order], dtype=np.int64)
    position = {path: i for i, path in enumerate(order)}
    agg = aggregate(profile, "sum")
    over = _over_time(source)
    data: Dict[str, Any] = {
        "name": profile.name, "nranks": profile.nranks, "files": len(profile.files),
        "created": profile.created, "version": profile.version,
        "run": run_line(profile),          # from the run metadata, "" without it
        "set": f"{profile.set[0]} {profile.set[1]}" if profile.set else "",
        "callpaths": [{"name": p[-1], "path": "<".join(p),
                       "parent": position[p[:-1]] if len(p) > 1 else -1} for p in order],
        "inc": _rows(agg.time_inc[index]), "exc": _rows(agg.time_exc[index]),
        "count": agg.count[index].tolist(),
        "stats": _stats(values.summary(profile, agg), index),
        "runtime": rounded(run_times(profile, agg)),
        "iterations": _iterations(profile, position),
        "snapshots": _snapshots(over, position),
        "mpi": _mpi(profile, index),
        "pop": _pop(profile, over, position),
        "trace": _trace(profile),
    }
    return data


def rounded(values: np.ndarray) -> List[Optional[float]]:
    """Five significant digits (the page's precision), NaN as null. Rounded
    as the quotient or product of an integer and a power of ten exact in
    binary (up to 1e22), so each number's JSON is its shortest decimal: what
    "%.5g" gives, without formatting a string per number but for the rare
    magnitudes beyond."""
    values = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(values) & (values != 0)
    digits = np.zeros(values.shape)
    digits[finite] = 4 - np.floor(np.log10(np.abs(values[finite])))
    exact = np.abs(digits) <= 22
    scale = 10.0 ** np.where(exact, np.abs(digits), 0)
    with np.errstate(invalid="ignore"):
        out = np.where(digits >= 0, np.round(values * scale) / scale, np.round(values / scale) * scale)
    if not exact.all():
        out[~exact] = np.char.mod("%.5g", values[~exact]).astype(np.float64)
    if np.isnan(out).any():
        return [None if v != v else v for v in out.tolist()]
    return out.tolist()


def _rows(matrix: np.ndarray) -> List[List[Optional[float]]]:
    return [rounded(r) for r in matrix]


def _stats(s: values.Summary, index: np.ndarray) -> Dict[str, Any]:
    """The call tree's columns (``tinyprof show``'s numbers), in the page's order."""
    return {"ran": s.ranks[index].tolist(), "inc": rounded(s.mean[index]),
            "exc": rounded(s.exclusive_mean[index]), "share": rounded(s.share[index]),
            "imbalance": rounded(s.imbalance[index]), "max": rounded(s.maximum[index]),
            "slowest": s.slowest[index].tolist()}


def _iterations(profile: Profile, position: Dict[tuple, int]) -> Dict[str, Any]:
    """The iteration plot's points per callpath (``analysis.iterations``)."""
    return {str(position[profile.callpaths[i]]): {
        "occurrence": st.occurrence.tolist(),       # the x axis: the first occurrence of each bin
        "execution": st.execution.tolist(), "iteration": st.iteration.tolist(),
        "min": rounded(st.min), "mean": rounded(st.mean), "max": rounded(st.max),
        "binned": st.binned} for i, st in per_iteration(profile, MAX_POINTS).items()}


def _kept(source: Optional[str]) -> List[int]:
    """The numbers of the kept snapshots of the output directory ``source``
    (none for a file or a Profile), evenly sampled down to MAX_SNAPSHOTS."""
    numbers = snapshots(source) if source and os.path.isdir(source) else []
    if len(numbers) > MAX_SNAPSHOTS:
        numbers = [numbers[int(i)] for i in np.linspace(0, len(numbers) - 1, MAX_SNAPSHOTS)]
    return numbers


def _over_time(source: Optional[str]) -> Optional[snapshot_intervals.Series]:
    """The kept snapshots as time series, each read once; None with fewer than two."""
    numbers = _kept(source)
    if len(numbers) < 2:
        return None
    assert source is not None       # no snapshot numbers without a source
    return snapshot_intervals.series(source, numbers)


def _snapshots(series: Optional[snapshot_intervals.Series], position: Dict[tuple, int]) -> Dict[str, Any]:
    """Per interval between kept snapshots, the exclusive time summed over
    ranks of the top callpaths and the rest."""
    if series is None:
        return {"numbers": [], "series": []}
    totals = np.zeros((len(series.numbers), len(position)))
    for j, path in enumerate(series.callpaths):
        if path in position:
            totals[:, position[path]] = series.exclusive[:, j]
    top = np.argsort(-totals.sum(axis=0), kind="stable")[:TOP_SNAPSHOT_PATHS]
    lines = [{"callpath": int(i), "values": rounded(totals[:, i])} for i in top]
    rest = np.setdiff1d(np.arange(len(position)), top)
    if len(rest):
        lines.append({"callpath": -1, "values": rounded(totals[:, rest].sum(axis=1))})
    return {"numbers": series.numbers, "created": series.created, "series": lines}


def _pop(profile: Profile, series: Optional[snapshot_intervals.Series], position: Dict[tuple, int]
         ) -> Optional[Dict[str, Any]]:
    """The POP efficiencies: per callpath (rows in tree order, worst parallel
    efficiency first among siblings), with the split of communication
    efficiency when traced and of load balance within and across nodes when
    the run spanned several, and, with kept snapshots, those of the
    callpaths that ran longest per interval. None without MPI capture."""
    if not profile.mpi_recorded:
        return None
    values: Tuple[str, ...]
    try:
        frame = pop.pop(profile, trace=True)
        values = POP_VALUES + SPLIT_VALUES
    except ValueError:          # no trace (or one that cannot be replayed): no split
        frame, values = pop.pop(profile), POP_VALUES
    if pop.several_hosts(frame):
        values += HOST_VALUES
    at = {path: i for i, path in enumerate(frame["callpath"])}
    table = np.array([frame[v] for v in values], np.float64).T
    rows = [[position[path], *rounded(table[at[path]])] for path in pop.worst_first(frame)]
    history = None
    if series is not None and series.efficiency is not None:
        history = _pop_history(series.numbers, series.created, series.efficiency, position)
    # a snapshot without MPI data: the table still stands
    problem = series.problem if series is not None else ""
    return {"columns": list(values), "rows": rows, "history": history, "problem": problem}


def _pop_history(numbers: List[int], created: List[str], steps: pop.Columns,
                 position: Dict[tuple, int]) -> Dict[str, Any]:
    """The efficiencies per interval (``steps``: ``pop_history``'s columns)
    of the callpaths that ran longest (with the load balance within and
    across nodes when the run recorded several hosts)."""
    total: Dict[tuple, float] = {}
    for path, runtime in zip(steps["callpath"], steps["runtime"]):
        if path in position:
            total[path] = total.get(path, 0.0) + runtime
    top = sorted(total, key=lambda p: -total[p])[:TOP_SNAPSHOT_PATHS]
    slot = {k: j for j, k in enumerate(numbers)}
    keys = POP_VALUES[4:] + (HOST_VALUES if HOST_VALUES[0] in steps else ())
    series = []
    for path in top:
        mine = np.array([p == path for p in steps["callpath"]], bool)
        where = [slot[k] for k in steps["snapshot"][mine].tolist()]
        line = {}
        for key in keys:
            values_k = np.full(len(numbers), np.nan)
            values_k[where] = steps[key][mine]
            line[key] = rounded(values_k)
        series.append({"callpath": position[path], **line})
    return {"numbers": numbers, "created": created, "series": series}


POP_VALUES = ("ranks", "runtime", "useful_mean", "useful_max", "load_balance",
              "communication_efficiency", "parallel_efficiency")
SPLIT_VALUES = ("serialization_efficiency", "transfer_efficiency")
HOST_VALUES = ("load_balance_in", "load_balance_out")


def _mpi(profile: Profile, index: np.ndarray) -> Optional[Dict[str, Any]]:
    """MPI time and bytes per communicator, op and size bucket; per callpath
    (exclusive, per rank); the point-to-point matrix; the transport view if
    recorded. None without capture."""
    if not profile.mpi_recorded:
        return None
    from . import mpi_text

    groups = sorted(mpi_text.group(profile, ("comm", "op", "bucket")), key=lambda g: -g[3])
    per_second = PER_SECOND[profile.unit]
    times = rounded(np.array([g[3] for g in groups], dtype=np.float64) / per_second)
    rows = [[comm or "(completion)", op, mpi_text.size_range(bucket), calls, nbytes, time]
            for ((comm, op, bucket), calls, nbytes, _), time in zip(groups, times)]
    per_node = mpi_per_node(profile)
    matrix = profile.comm_matrix()
    sizes = [mpi_text.size_range(b) for b in sorted({bucket for (_, _, bucket), *_ in groups})]
    return {"ops": rows, "sizes": sizes, "total_time": sum(g[3] for g in groups) / per_second,
            "time": _rows(per_node["time"][index]), "bytes": per_node["bytes"][index].tolist(),
            "matrix": matrix.tolist() if matrix.any() else None, "transport": _transport(profile)}


def _transport(profile: Profile) -> Optional[Dict[str, Any]]:
    """The transport view summed over ranks: per callpath, MPI op, UCP op,
    protocol and transport, calls and bytes, most bytes first; each rank's
    UCX state. None when not recorded."""
    if not profile.mpi_data.ucx:
        return None
    from . import mpi_text

    rows = [[_where(key[0]), *key[1:], calls, nbytes]
            for key, calls, nbytes in mpi_text.transport_rows(profile)]
    return {"rows": rows, "states": mpi_text.ucx_states(profile)}


def _trace(profile: Profile) -> Optional[Dict[str, Any]]:
    """The critical path per (rank, callpath) and the wait states; None untraced."""
    try:
        traced = profile.trace
    except ValueError:
        return None
    from ..analysis import trace

    path = trace.critical_path(traced)
    summary = trace.critical_path_summary(traced, path)
    waits = trace.wait_states(traced)
    kinds = list(trace.WAIT_KINDS)
    return {
        "length": trace.path_length(path),
        "wall": float(traced.wall_time * trace.SECONDS[traced.unit]),
        "ranks": int(path["rank"].nunique()),
        "critical": [[int(r.rank), _where(r.callpath), float(r.time), float(r.mpi), float(r.share)]
                     for r in summary.head(TOP_ROWS).itertuples()],
        "kinds": kinds,
        "waits": [[_where(r.callpath), int(r.rank), *(float(getattr(r, k)) for k in kinds),
                   float(r.total)] for r in waits.head(TOP_ROWS).itertuples()],
        "wait_total": float(waits["total"].sum()) if len(waits) else 0.0,
    }


def _where(callpath: Sequence[str]) -> str:
    return "<".join(callpath) or "(outside every event)"
