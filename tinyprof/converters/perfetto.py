"""Chrome trace-event JSON of a traced profile, for the Perfetto UI
(ui.perfetto.dev, or ``vizviewer`` offline) and chrome://tracing.

- one process per rank (``pid`` = the rank, named ``rank N``), one track per
  thread (``tid`` = the OS thread id; the thread that made the MPI calls is
  named ``main``);
- a complete slice (``ph: "X"``) per occurrence: ``name`` the event's name,
  ``ts`` and ``dur`` in microseconds since the run's first record, ``args``
  the callpath and, where each occurrence has one, its custom metrics;
- a slice per MPI call, named ``MPI_<op>``, with communicator, bytes and
  peers in ``args``;
- a flow arrow (``ph: "s"`` / ``"f"``) per matched message, from inside its
  send to inside the call that completed its receive.

Spec: the Trace Event Format (Google, 2016); docs/trace.md shows it in Perfetto.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List

import numpy as np

from ..analysis import trace as _trace
from ..analysis.profile import Profile
from ..format.layout import write_atomic
from . import ConvertError


def to_perfetto(profile: Profile) -> Dict[str, Any]:
    """The trace of ``profile`` as a trace-event JSON object (a dict);
    ConvertError when it was not recorded with ``trace=True``."""
    try:
        trace = profile.trace
    except ValueError as e:
        raise ConvertError(str(e)) from None
    return {"traceEvents": _metadata(trace) + _slices(profile, trace) + _flows(trace),
            "displayTimeUnit": "ms",
            "otherData": {"profile": profile.name, "nranks": profile.nranks,
                          "origin_ns": trace.origin, "run": profile.run}}


def write(profile: Profile, path: str | os.PathLike[str], statistic: str = "sum") -> str:
    """Write the JSON of ``profile`` to ``path`` atomically (``statistic`` is
    not used: every occurrence is its own slice)."""
    data = json.dumps(to_perfetto(profile), separators=(",", ":")).encode()
    write_atomic(os.fspath(path), data)
    return os.fspath(path)


def _us(ns: np.ndarray) -> List[float]:
    """Microseconds, 0.3 ns above the exact value: importers that truncate
    ``ts * 1000`` and those that round it both get the exact ns, so a slice
    and the one nested in it never seem to overlap by 1 ns."""
    return np.round((ns + 0.3) / 1e3, 4).tolist()


def _metadata(trace: _trace.Trace) -> List[Dict[str, Any]]:
    main = _trace.main_threads(trace)
    out: List[Dict[str, Any]] = []
    keys = np.unique(np.concatenate([_trace.pair_key(c["rank"], c["thread"])
                                     for c in (trace.ev, trace.calls)]))
    pairs = np.column_stack([keys >> 32, keys & 0xFFFFFFFF])
    for rank in np.unique(pairs[:, 0]).tolist():
        out.append({"ph": "M", "name": "process_name", "pid": rank, "args": {"name": f"rank {rank}"}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": rank, "args": {"sort_index": rank}})
    for rank, tid in pairs.tolist():
        name = "main" if tid == main[rank] else f"thread {tid}"
        out.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid,
                    "args": {"name": name}})
        out.append({"ph": "M", "name": "thread_sort_index", "pid": rank, "tid": tid,
                    "args": {"sort_index": 0 if tid == main[rank] else 1}})
    return out


def _slices(profile: Profile, trace: _trace.Trace) -> List[Dict[str, Any]]:
    ev, c = trace.ev, trace.calls
    names = ["<".join(p) for p in trace.callpaths]
    metrics = _occurrence_metrics(profile, trace)
    rows: List[tuple] = []
    for i, (rank, tid, path, ts, dur) in enumerate(zip(
            ev["rank"].tolist(), ev["thread"].tolist(), ev["path"].tolist(),
            _us(ev["start"]), _us(ev["end"] - ev["start"]))):
        args: Dict[str, Any] = {"callpath": names[path]}
        for key, values in metrics.get((rank, path), {}).items():
            v = values[i]
            if v == v:                                  # NaN: not given
                args[key] = v
        rows.append((rank, tid, ts, -dur, {"ph": "X", "cat": "region", "name": trace.callpaths[path][-1],
                                          "pid": rank, "tid": tid, "ts": ts, "dur": dur,
                                          "args": args}))
    ops, comms = trace.ops, trace.comms
    for rank, tid, path, ts, dur, op, comm, nbytes, root in zip(
            c["rank"].tolist(), c["thread"].tolist(), c["path"].tolist(), _us(c["start"]),
            _us(c["end"] - c["start"]), c["op"].tolist(), c["comm"].tolist(), c["bytes"].tolist(),
            c["root"].tolist()):
        args = {"callpath": names[path] if path >= 0 else "", "comm": comms[comm] if comm >= 0 else "",
                "bytes": nbytes}
        if root >= 0:
            args["root"] = root
        rows.append((rank, tid, ts, -dur, {"ph": "X", "cat": "mpi", "name": f"MPI_{ops[op]}",
                                          "pid": rank, "tid": tid, "ts": ts, "dur": dur,
                                          "args": args}))
    rows.sort(key=lambda r: r[:4])
    return [r[4] for r in rows]


def _occurrence_metrics(profile: Profile, trace: _trace.Trace) -> Dict[tuple, Dict[str, Any]]:
    """Per (rank, path): {metric: value per ev row} for the custom metrics,
    where the profile holds one value per traced occurrence (one thread, no
    occurrence dropped, no loop summing): they pair up in recording order."""
    keys = [k for k, consistent in profile.metrics if not consistent]
    out: Dict[tuple, Dict[str, Any]] = {}
    if not keys:
        return out
    ev = trace.ev
    order = np.lexsort((ev["start"], ev["path"], ev["rank"]))
    bounds = np.flatnonzero(np.diff(ev["rank"][order]) | np.diff(ev["path"][order])) + 1
    for group in np.split(order, bounds):
        if not len(group):
            continue
        rank, path = int(ev["rank"][group[0]]), int(ev["path"][group[0]])
        if len(np.unique(ev["thread"][group])) != 1 or trace.dropped[rank, 0]:
            continue
        per_key = {}
        for key in keys:
            values = [v for e in profile.series(trace.callpaths[path], rank, key) for v in e]
            if len(values) != len(group):
                break
            column = np.full(len(ev["rank"]), np.nan)
            column[group] = values
            per_key[key] = column
        else:
            out[(rank, path)] = per_key
    return out


def _flows(trace: _trace.Trace) -> List[Dict[str, Any]]:
    """An arrow per matched message: from the start of its send to the end of
    the call that completed its receive, 1 ns inside each so that each end
    binds to the slice enclosing it (``bp: "e"``). Causality puts the
    receive's end after the send's start, but the clocks' alignment error
    (docs/trace.md#clocks) can swap two instants a few µs apart, and
    Perfetto drops an arrow that ends before it starts: such an arrow ends
    1 ns after its start instead, on the receiver's slice enclosing then."""
    c, m = trace.calls, trace.msgs
    send, recv = m["send"], m["recv"]
    at_send = c["start"][send] + np.minimum((c["end"][send] - c["start"][send]) // 2, 1)
    at_recv = np.maximum(c["end"][recv] - np.minimum((c["end"][recv] - c["start"][recv]) // 2, 1),
                         at_send + 1)
    out: List[Dict[str, Any]] = []
    for k, (s_rank, s_tid, s_ts, r_rank, r_tid, r_ts, nbytes, tag) in enumerate(zip(
            c["rank"][send].tolist(), c["thread"][send].tolist(), _us(at_send),
            c["rank"][recv].tolist(), c["thread"][recv].tolist(), _us(at_recv),
            m["bytes"].tolist(), m["tag"].tolist())):
        common = {"cat": "message", "name": f"message {nbytes} B, tag {tag}", "id": k}
        out.append({"ph": "s", "pid": s_rank, "tid": s_tid, "ts": s_ts, **common})
        out.append({"ph": "f", "bp": "e", "pid": r_rank, "tid": r_tid, "ts": r_ts, **common})
    return out

