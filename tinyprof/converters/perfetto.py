"""Chrome trace-event JSON of a traced profile, for the Perfetto UI
(ui.perfetto.dev, or ``vizviewer`` offline) and chrome://tracing.

- one process, the run (``pid`` 0), and one thread track per rank and OS
  thread, named ``rank N`` (the thread that made the MPI calls) or ``rank N
  thread T`` (another thread, ``T`` its OS id), whose ``tid`` counts from 1 in
  rank order, each rank's MPI thread first. The Perfetto UI orders the
  threads of a process by ``tid``, but orders processes by their slice count
  and ignores ``process_sort_index``: with one process per rank, the ranks
  would be listed out of order;
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
from typing import Any, Dict, List, Tuple

import numpy as np

from ..analysis.profile import Profile
from ..analysis.trace import Trace, main_threads, pair_key
from ..errors import ConvertError
from ..format.output_dir import write_atomic


def to_perfetto(profile: Profile) -> Dict[str, Any]:
    """The trace of ``profile`` as a trace-event JSON object (a dict);
    ConvertError when it was not recorded with ``trace=True``."""
    try:
        trace = profile.trace
    except ValueError as e:
        raise ConvertError(str(e)) from None
    tracks = _tracks(trace)
    return {"traceEvents": _metadata(profile, trace, tracks) + _slices(profile, trace, tracks)
            + _flows(trace, tracks),
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


PID = 0         # the one process, the run: no track has its id, so none is its "main thread"


def _tracks(trace: Trace) -> Dict[Tuple[int, int], int]:
    """(rank, OS thread id) -> the track's ``tid``: 1, 2, ... by rank, each
    rank's MPI thread first, then its other threads by id."""
    main = main_threads(trace)
    keys = np.unique(np.concatenate([pair_key(c["rank"], c["thread"])
                                     for c in (trace.ev, trace.calls)]))
    pairs = sorted(((int(k >> 32), int(k & 0xFFFFFFFF)) for k in keys),
                   key=lambda p: (p[0], p[1] != main[p[0]], p[1]))
    return {pair: n for n, pair in enumerate(pairs, 1)}


def _metadata(profile: Profile, trace: Trace,
              tracks: Dict[Tuple[int, int], int]) -> List[Dict[str, Any]]:
    main = main_threads(trace)
    out: List[Dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": PID,
         "args": {"name": f"{profile.name} ({profile.nranks} ranks)"}}]
    for (rank, thread), tid in tracks.items():
        name = f"rank {rank}" if thread == main[rank] else f"rank {rank} thread {thread}"
        out.append({"ph": "M", "name": "thread_name", "pid": PID, "tid": tid, "args": {"name": name}})
        out.append({"ph": "M", "name": "thread_sort_index", "pid": PID, "tid": tid,
                    "args": {"sort_index": tid}})      # for viewers that read it
    return out


def _slices(profile: Profile, trace: Trace,
            tracks: Dict[Tuple[int, int], int]) -> List[Dict[str, Any]]:
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
                                          "pid": PID, "tid": tracks[rank, tid], "ts": ts, "dur": dur,
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
                                          "pid": PID, "tid": tracks[rank, tid], "ts": ts, "dur": dur,
                                          "args": args}))
    rows.sort(key=lambda r: r[:4])
    return [r[4] for r in rows]


def _occurrence_metrics(profile: Profile, trace: Trace) -> Dict[tuple, Dict[str, Any]]:
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


def _flows(trace: Trace, tracks: Dict[Tuple[int, int], int]) -> List[Dict[str, Any]]:
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
        out.append({"ph": "s", "pid": PID, "tid": tracks[s_rank, s_tid], "ts": s_ts, **common})
        out.append({"ph": "f", "bp": "e", "pid": PID, "tid": tracks[r_rank, r_tid], "ts": r_ts, **common})
    return out

