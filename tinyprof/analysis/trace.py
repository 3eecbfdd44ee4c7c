"""Trace analysis (docs/trace.md): all ranks' traced occurrences and MPI
calls on one clock, messages matched, wait states and the critical path.

Everything is numpy over whole columns; Python loops run once per rank,
per nesting depth, or per hop of the critical path between ranks, never per
occurrence, so a million occurrences take about a second or less
(``benchmarks/trace.py``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from ..format import trace_section

Callpath = Tuple[str, ...]

# Collectives by who waits for whom (Scalasca's wait-state patterns).
ALL_TO_ALL = frozenset({"Barrier", "Allreduce", "Allgather", "Allgatherv", "Alltoall",
                        "Alltoallv", "Alltoallw", "Reduce_scatter", "Reduce_scatter_block",
                        "Scan", "Exscan"})
ONE_TO_ALL = frozenset({"Bcast", "Scatter", "Scatterv"})          # non-roots wait for the root
ALL_TO_ONE = frozenset({"Reduce", "Gather", "Gatherv"})           # the root waits for the last
NONBLOCKING_COLLECTIVES = frozenset("I" + op.lower()[0] + op[1:] for op in
                                    ALL_TO_ALL | ONE_TO_ALL | ALL_TO_ONE)
BLOCKING_SENDS = frozenset({"Send", "Ssend", "Rsend"})            # may wait for the receiver
_SELF_LIKE = ("COMM_SELF",)


@dataclass
class Trace:
    """Every rank's trace on rank 0's clock, in ``unit`` since ``origin``
    (the earliest record). Columns are int64 numpy arrays, rows sorted by
    rank, then start:

    - ``ev``: rank, thread (OS tid), path (index into ``callpaths``), start, end;
    - ``calls``: rank, thread, path (-1 outside any event), start, end, op
      (index into ``ops``), comm (index into ``comms``, -1 for none), bytes,
      root (world rank, -1 if none);
    - ``msgs``: matched messages: send and recv (indices into ``calls``),
      src, dst, comm, tag, bytes;
    - ``dropped``: (nranks, 2) occurrences and calls not kept beyond the limit.
    """

    nranks: int
    unit: str
    callpaths: List[Callpath]
    ops: List[str]
    comms: List[str]
    origin: int
    ev: Dict[str, np.ndarray]
    calls: Dict[str, np.ndarray]
    msgs: Dict[str, np.ndarray]
    dropped: np.ndarray

    @property
    def wall_time(self) -> int:
        """From the first record's start to the last one's end, in ``unit``."""
        ends = [a for a in (self.ev["end"], self.calls["end"]) if len(a)]
        return int(max(a.max() for a in ends)) if ends else 0


def _empty(columns: Sequence[str]) -> Dict[str, np.ndarray]:
    return {c: np.zeros(0, np.int64) for c in columns}


EV_COLUMNS = ("rank", "thread", "path", "start", "end")
CALL_COLUMNS = ("rank", "thread", "path", "start", "end", "op", "comm", "bytes", "root")
MSG_COLUMNS = ("send", "recv", "src", "dst", "comm", "tag", "bytes")


def from_files(files: Sequence[Any], callpaths: Sequence[Callpath], nranks: int,
               unit: str) -> Trace:
    """The trace of a profile's parsed files (``ParsedFile``, in rank order);
    ``callpaths``: the profile's callpath list. Raises ValueError when a file
    has no trace section, FormatError when one is bad."""
    index = {p: i for i, p in enumerate(callpaths)}
    ops: Dict[str, int] = {}
    comms: Dict[str, int] = {}
    ev: List[np.ndarray] = []
    calls: List[np.ndarray] = []
    eps: List[np.ndarray] = []
    dropped = np.zeros((nranks, 2), np.int64)
    ncalls = 0
    for f in files:
        if "trace" not in f.sections:
            raise ValueError(f"{f.path}: no trace: record with Profiler(trace=True) "
                             "or TINYPROF_TRACE=1")
        h = f.header
        paths = np.array([index[p] for p in f.paths], np.int64)
        for b in trace_section.parse(f.sections["trace"], f.path, f.section_lines["trace"],
                                     len(f.parents), h.first_rank, h.rank_count, h.nranks):
            dropped[b.rank] = b.dropped
            threads = np.array(b.threads, np.int64)
            e = b.events
            # ends through the clock too: one offset for all, nesting survives
            ev.append(np.column_stack([np.full(len(e), b.rank), threads[e[:, 0]] if len(e)
                                       else e[:, 0], paths[e[:, 1]] if len(e) else e[:, 1],
                                       b.global_times(e[:, 2]),
                                       b.global_times(e[:, 2] + e[:, 3])]))
            c = b.calls
            op = np.array([ops.setdefault(o, len(ops)) for o in b.ops], np.int64)
            cm = np.array([comms.setdefault(n, len(comms)) for n in b.comms] + [-1], np.int64)
            calls.append(np.column_stack([
                np.full(len(c), b.rank), threads[c[:, 0]] if len(c) else c[:, 0],
                np.where(c[:, 1] >= 0, paths[np.maximum(c[:, 1], 0)] if len(paths) else -1, -1),
                b.global_times(c[:, 2]), b.global_times(c[:, 2] + c[:, 3]),
                op[c[:, 4]] if len(c) else c[:, 4], cm[c[:, 5]],
                c[:, 6], c[:, 7]]).reshape(-1, len(CALL_COLUMNS)))
            p = b.endpoints.copy()
            p[:, 0] += ncalls
            p[:, 5] = cm[p[:, 5]]
            eps.append(np.column_stack([p, np.full(len(p), b.rank)]))
            ncalls += len(c)
    evs = np.concatenate(ev) if ev else np.zeros((0, 5), np.int64)
    cls = np.concatenate(calls) if calls else np.zeros((0, 9), np.int64)
    origin = min([int(np.min(a[:, 3])) for a in (evs, cls) if len(a)], default=0)
    evs[:, 3:5] -= origin
    cls[:, 3:5] -= origin
    trace = Trace(nranks, unit, list(callpaths), list(ops), list(comms), origin,
                  dict(zip(EV_COLUMNS, evs.T.copy())), dict(zip(CALL_COLUMNS, cls.T.copy())),
                  _empty(MSG_COLUMNS), dropped)
    _nest_calls(trace)
    trace.msgs = match(trace, np.concatenate(eps) if eps else np.zeros((0, 7), np.int64))
    return trace


def _nest_calls(trace: Trace) -> None:
    """Clip every MPI call to the occurrence of its event that holds its
    midpoint (same rank, thread and callpath). The library times calls with
    the TSC, converted to the core's clock at flush time: a call can stick
    out of its event by some ns, which tools that need nested slices
    (Perfetto) would not show."""
    ev, c = trace.ev, trace.calls
    sel = np.flatnonzero(c["path"] >= 0)
    if not len(sel) or not len(ev["rank"]):
        return
    track = pair_key(np.concatenate([ev["rank"], c["rank"][sel]]),
                      np.concatenate([ev["thread"], c["thread"][sel]]))
    _, track = np.unique(track, return_inverse=True)
    group = pair_key(track.ravel(), np.concatenate([ev["path"], c["path"][sel]]))
    mid = c["start"][sel] + (c["end"][sel] - c["start"][sel]) // 2
    time = np.concatenate([ev["start"], mid])
    is_call = np.r_[np.zeros(len(ev["rank"]), bool), np.ones(len(sel), bool)]
    order = np.lexsort((is_call, time, group))      # an occurrence before a call at its start
    # for each call, the last occurrence before it in the same group
    pos = np.where(~is_call[order], np.arange(len(order)), -1)
    last = np.maximum.accumulate(pos)
    calls_at = np.flatnonzero(is_call[order])
    found = last[calls_at]
    ok = found >= 0
    found, calls_at = found[ok], calls_at[ok]
    e, k = order[found], sel[order[calls_at] - len(ev["rank"])]
    same = (group[order[found]] == group[order[calls_at]]) & (ev["end"][e] >= mid[order[calls_at] -
                                                                                  len(ev["rank"])])
    e, k = e[same], k[same]
    c["start"][k] = np.clip(c["start"][k], ev["start"][e], ev["end"][e])
    c["end"][k] = np.clip(c["end"][k], c["start"][k], ev["end"][e])


def match(trace: Trace, endpoints: np.ndarray) -> Dict[str, np.ndarray]:
    """Messages from endpoints (call, kind, peer, tag, bytes, comm, rank): the
    k-th send from s to d on communicator c with tag t matches the k-th
    receive at d from s on c with tag t, sends in call order and receives in
    completion order (MPI's non-overtaking rule; exact unless receives from
    one peer with one tag complete out of posting order)."""
    call, kind, peer, tag, nbytes, comm, rank = endpoints.T if len(endpoints) else \
        np.zeros((7, 0), np.int64)
    keyed = []
    for k, (src, dst) in ((trace_section.SEND, (rank, peer)), (trace_section.RECV, (peer, rank))):
        sel = np.flatnonzero(kind == k)
        order = sel[np.lexsort((trace.calls["start"][call[sel]], tag[sel], comm[sel], dst[sel],
                                src[sel]))]
        key = np.column_stack([src[order], dst[order], comm[order], tag[order]])
        new = np.ones(len(order), bool)
        new[1:] = np.any(key[1:] != key[:-1], axis=1)
        first = np.maximum.accumulate(np.where(new, np.arange(len(order)), 0))
        keyed.append((order, np.column_stack([key, np.arange(len(order)) - first])))
    (s_idx, s_key), (r_idx, r_key) = keyed
    common, si, ri = _intersect_rows(s_key, r_key)
    return {"send": call[s_idx[si]], "recv": call[r_idx[ri]], "src": common[:, 0],
            "dst": common[:, 1], "comm": common[:, 2], "tag": common[:, 3],
            "bytes": nbytes[r_idx[ri]]}


def _intersect_rows(a: np.ndarray, b: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows present in both (each row unique within its array): the rows and
    their indices in a and in b."""
    if not len(a) or not len(b):
        return np.zeros((0, a.shape[1]), np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    both = np.concatenate([a, b])
    _, inverse = np.unique(both, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    ia, ib = inverse[:len(a)], inverse[len(a):]
    _, ca, cb = np.intersect1d(ia, ib, assume_unique=True, return_indices=True)
    return a[ca], ca, cb


# -- collectives ---------------------------------------------------------------------

def _op_mask(trace: Trace, names: frozenset) -> np.ndarray:
    """For every call: whether its operation is one of ``names``."""
    return np.array([op in names for op in trace.ops] + [False], bool)[trace.calls["op"]]


def collective_instances(trace: Trace) -> Tuple[np.ndarray, int]:
    """For every call, the instance of the collective it takes part in (the
    k-th blocking collective on its communicator, the same k on every rank),
    -1 for other calls; and the number of instances."""
    c = trace.calls
    comm_ok = np.array([not n.startswith(_SELF_LIKE) for n in trace.comms] + [False], bool)
    sel = np.flatnonzero(_op_mask(trace, ALL_TO_ALL | ONE_TO_ALL | ALL_TO_ONE) &
                         comm_ok[c["comm"]])
    inst = np.full(len(c["op"]), -1, np.int64)
    if not len(sel):
        return inst, 0
    order = sel[np.lexsort((c["start"][sel], c["rank"][sel], c["comm"][sel]))]
    key = pair_key(c["comm"][order], c["rank"][order])
    new = np.ones(len(order), bool)
    new[1:] = key[1:] != key[:-1]
    first = np.maximum.accumulate(np.where(new, np.arange(len(order)), 0))
    seq = np.arange(len(order)) - first                    # k on its (comm, rank)
    _, ids = np.unique(pair_key(c["comm"][order], seq), return_inverse=True)
    inst[order] = ids.ravel()
    return inst, int(np.max(ids)) + 1


def _dependencies(trace: Trace) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For every call: the call it waited for (-1: none), when that one
    started, and the waiting time, with its kind (0 none, 1 late sender,
    2 late receiver, 3 collective, 4 barrier). A call waits when its
    partner started after it did."""
    c, m = trace.calls, trace.msgs
    n = len(c["op"])
    start, end = c["start"], c["end"]
    dep = np.full(n, -1, np.int64)
    dep_start = np.full(n, np.iinfo(np.int64).min, np.int64)
    kind = np.zeros(n, np.int64)

    def take(callers: np.ndarray, partners: np.ndarray, k: int) -> None:
        """Keep, per caller, its latest-starting partner if it is later than
        what the caller already has."""
        later = start[partners] > dep_start[callers]
        callers, partners = callers[later], partners[later]
        last = _last_of_groups(callers, start[partners])
        callers, partners = callers[last], partners[last]
        dep[callers] = partners
        dep_start[callers] = start[partners]
        kind[callers] = k

    take(m["recv"], m["send"], 1)
    blocking_send = _op_mask(trace, BLOCKING_SENDS)[m["send"]]
    # a blocking send that ended after the receive began waited for it
    s, r = m["send"][blocking_send], m["recv"][blocking_send]
    waited = end[s] > start[r]
    take(s[waited], r[waited], 2)

    inst, ninst = collective_instances(trace)
    if ninst:
        sel = np.flatnonzero(inst >= 0)
        i = inst[sel]
        latest = np.full(ninst, -1, np.int64)           # the last arrival of each instance
        last = sel[_last_of_groups(i, start[sel])]
        latest[inst[last]] = last
        root_call = np.full(ninst, -1, np.int64)
        is_root = c["root"][sel] == c["rank"][sel]
        root_call[i[is_root]] = sel[is_root]
        kinds = np.where(_op_mask(trace, frozenset({"Barrier"}))[sel], 4, 3)
        to_all = _op_mask(trace, ALL_TO_ALL)[sel]
        take(sel[to_all], latest[i[to_all]], 0)
        kind[sel[to_all]] = np.where(dep[sel[to_all]] >= 0, kinds[to_all], kind[sel[to_all]])
        one = _op_mask(trace, ONE_TO_ALL)[sel] & ~is_root & (root_call[i] >= 0)
        take(sel[one], root_call[i[one]], 3)
        gather = _op_mask(trace, ALL_TO_ONE)[sel] & is_root
        take(sel[gather], latest[i[gather]], 3)
        dep[dep == np.arange(n)] = -1                   # the last arrival waited for nobody
    has = dep >= 0
    dep_start = np.where(has, dep_start, start)
    wait = np.clip(dep_start - start, 0, end - start)
    kind[wait == 0] = 0
    dep[wait == 0] = -1
    return dep, dep_start, wait, kind


def _last_of_groups(groups: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Indices of the row with the largest value of each group (the last
    such row on ties)."""
    order = np.lexsort((np.arange(len(groups)), values, groups))
    end = np.ones(len(order), bool)
    end[:-1] = groups[order][1:] != groups[order][:-1]
    return order[end]


WAIT_KINDS = ("late_sender", "late_receiver", "wait_collective", "wait_barrier")


def wait_states(trace: Trace) -> Any:
    """Waiting time per (callpath, rank), in seconds: a pandas DataFrame with
    columns callpath (a tuple; ``()`` outside any event), rank, one column
    per kind of WAIT_KINDS and ``total``, sorted by total, largest first."""
    import pandas as pd

    _, _, wait, kind = _dependencies(trace)
    c = trace.calls
    sel = np.flatnonzero(kind > 0)
    scale = SECONDS[trace.unit]
    frame = pd.DataFrame({"path": c["path"][sel], "rank": c["rank"][sel],
                          "kind": np.array(WAIT_KINDS)[kind[sel] - 1], "wait": wait[sel] * scale})
    table = frame.pivot_table(index=["path", "rank"], columns="kind", values="wait",
                              aggfunc="sum", fill_value=0.0)
    table = table.reindex(columns=list(WAIT_KINDS), fill_value=0.0).reset_index()
    table.columns.name = None
    table.insert(0, "callpath", [_callpath(trace, p) for p in table.pop("path")])
    table["total"] = table[list(WAIT_KINDS)].sum(axis=1)
    return table.sort_values(["total", "rank"], ascending=[False, True],
                             kind="stable").reset_index(drop=True)


SECONDS = {"ns": 1e-9}
_MAX = np.iinfo(np.int64).max


def _callpath(trace: Trace, path: int) -> Callpath:
    return trace.callpaths[path] if path >= 0 else ()


# -- the critical path -----------------------------------------------------------------

def main_threads(trace: Trace) -> np.ndarray:
    """Per rank, the thread that made the most MPI calls, or for a rank with
    none, the one with the most occurrences: the thread the path follows."""
    main = np.full(trace.nranks, -1, np.int64)
    for cols in (trace.ev, trace.calls):          # calls last: they decide
        if len(cols["rank"]):
            keys, counts = np.unique(pair_key(cols["rank"], cols["thread"]), return_counts=True)
            rank, thread = keys >> 32, keys & 0xFFFFFFFF
            order = np.lexsort((-counts, rank))
            first = order[np.unique(rank[order], return_index=True)[1]]
            main[rank[first]] = thread[first]
    return main


def pair_key(high: np.ndarray, low: np.ndarray) -> np.ndarray:
    """One sortable int64 per pair of naturals below 2^31 and 2^32 (ranks,
    communicators; OS thread ids, sequence numbers): 1-D sorts are ~10x
    faster than sorting rows."""
    return (high.astype(np.int64) << 32) | low.astype(np.int64)


def _rows(cols: Dict[str, np.ndarray], rank: int, thread: int) -> np.ndarray:
    """Indices of ``rank``'s rows on ``thread`` (rows are sorted by rank)."""
    lo, hi = np.searchsorted(cols["rank"], [rank, rank + 1])
    return lo + np.flatnonzero(cols["thread"][lo:hi] == thread)


@dataclass
class _Timeline:
    """One rank's main thread as a piecewise-constant label: in
    [bounds[k], bounds[k + 1]) it runs ``label[k]`` (an index into callpaths,
    ``ncallpaths + call`` inside an MPI call, -1 outside every event)."""

    bounds: np.ndarray
    label: np.ndarray


def _timeline(trace: Trace, rank: int, thread: int, lo: int, hi: int) -> _Timeline:
    ev, c = trace.ev, trace.calls
    e, k = _rows(ev, rank, thread), _rows(c, rank, thread)
    bounds = np.unique(np.concatenate([[lo, hi], ev["start"][e], ev["end"][e],
                                       c["start"][k], c["end"][k]]))
    label = np.full(len(bounds) - 1, -1, np.int64)
    depth = np.array([len(p) for p in trace.callpaths], np.int64)
    ncp = len(trace.callpaths)
    # paint shallow to deep: the innermost occurrence wins; calls are innermost
    layers = [(e[depth[ev["path"][e]] == d], ev, ev["path"]) for d in np.unique(depth[ev["path"][e]])]
    layers.append((k, c, ncp + np.arange(len(c["op"]))))
    for rows, cols, labels in layers:
        if not len(rows):
            continue
        si = np.searchsorted(bounds, cols["start"][rows])
        ei = np.searchsorted(bounds, cols["end"][rows])
        keep = ei > si
        si, ei, rows = si[keep], ei[keep], rows[keep]
        order = np.argsort(si, kind="stable")
        si, ei, rows = si[order], ei[order], rows[order]
        cover = np.bincount(si, minlength=len(label) + 1) - \
            np.bincount(ei, minlength=len(label) + 1)
        inside = np.flatnonzero(np.cumsum(cover)[:-1] > 0)
        owner = np.searchsorted(si, inside, side="right") - 1
        label[inside] = labels[rows[owner]]
    return _Timeline(bounds, label)


def critical_path(trace: Trace) -> Any:
    """The critical path (Böhme et al., backward replay): from the end of
    the rank that finished last, back in time along its own records; at a
    call that waited (a late sender, the last arrival at a collective, a
    receiver that a blocking send waited for), over to the partner's rank at
    the moment the partner started. The path is contiguous in time, so its
    length is the last end minus the start of the rank it begins on.

    A pandas DataFrame of segments in time order: rank, callpath (a tuple),
    op (the MPI operation, "" for computation), start (seconds since the
    first record), duration (seconds)."""
    import pandas as pd

    rank, t0, t1, label = _path(trace)
    ncp = len(trace.callpaths)
    c = trace.calls
    names = np.array(trace.ops + [""], object)
    in_call = label >= ncp
    call = np.where(in_call, label - ncp, 0)
    path = np.where(in_call, c["path"][call] if len(c["path"]) else -1, label)
    scale = SECONDS[trace.unit]
    frame = pd.DataFrame({
        "rank": rank,
        "callpath": [_callpath(trace, p) for p in path.tolist()],
        "op": np.where(in_call, names[c["op"][call]] if len(c["op"]) else "", ""),
        "start": t0 * scale,
        "duration": (t1 - t0) * scale,
    })
    # summed in ticks: a sum of rounded seconds may exceed the wall time
    frame.attrs["length"] = int((t1 - t0).sum()) * scale
    return frame


def path_length(path: Any) -> float:
    """The length of a path from ``critical_path`` in seconds."""
    return float(path.attrs.get("length", path["duration"].sum()))


def _path(trace: Trace) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The path's pieces in time order: rank, start, end, timeline label;
    consecutive pieces of one rank and label merged."""
    c = trace.calls
    if not len(trace.ev["rank"]) and not len(c["rank"]):
        return (np.zeros(0, np.int64),) * 4
    main = main_threads(trace)
    dep, dep_start, _, _ = _dependencies(trace)
    rows = {r: (_rows(trace.ev, r, int(main[r])), _rows(c, r, int(main[r])))
            for r in range(trace.nranks) if main[r] >= 0}
    lo = {r: int(min(trace.ev["start"][e].min(initial=_MAX), c["start"][k].min(initial=_MAX)))
          for r, (e, k) in rows.items()}
    hi = {r: int(max(trace.ev["end"][e].max(initial=-_MAX), c["end"][k].max(initial=-_MAX)))
          for r, (e, k) in rows.items()}
    calls = {r: k[np.argsort(c["end"][k], kind="stable")] for r, (_, k) in rows.items()}
    # per rank, for each call (by end), the last call at or before it that waited
    waited = {r: np.maximum.accumulate(np.where(dep[k] >= 0, np.arange(len(k)), -1))
              if len(k) else k for r, k in calls.items()}
    r = max(hi, key=lambda q: (hi[q], -q))
    t = hi[r]
    visits: List[Tuple[int, int, int]] = []        # (rank, from, to), backwards
    for _ in range(len(c["op"]) + trace.nranks + 1):
        i = int(np.searchsorted(c["end"][calls[r]], t, side="right")) - 1
        j = int(waited[r][i]) if i >= 0 else -1
        if j < 0:
            visits.append((r, min(lo[r], t), t))
            break
        call = int(calls[r][j])
        land = min(max(int(dep_start[call]), int(c["start"][call])), int(c["end"][call]), t)
        visits.append((r, land, t))
        r, t = int(c["rank"][dep[call]]), land
    timelines: Dict[int, _Timeline] = {}
    for r, _, _ in visits:
        if r not in timelines:
            timelines[r] = _timeline(trace, r, int(main[r]), lo[r], hi[r])
    pieces = [_pieces(timelines[r], r, a, b) for r, a, b in reversed(visits)]
    out = [np.concatenate(x) for x in zip(*pieces)]
    rank, t0, t1, label = out
    keep = t1 > t0
    rank, t0, t1, label = rank[keep], t0[keep], t1[keep], label[keep]
    new = np.ones(len(rank), bool)
    new[1:] = (rank[1:] != rank[:-1]) | (label[1:] != label[:-1]) | (t0[1:] != t1[:-1])
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], len(rank)) - 1
    return rank[starts], t0[starts], t1[ends], label[starts]


def _pieces(tl: _Timeline, rank: int, a: int, b: int
            ) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """[a, b] on ``rank`` cut where its timeline changes."""
    k0 = max(int(np.searchsorted(tl.bounds, a, side="right")) - 1, 0)
    k1 = max(int(np.searchsorted(tl.bounds, b, side="left")), k0 + 1)
    k = np.arange(k0, min(k1, len(tl.label)))
    if not len(k):
        return (np.array([rank]), np.array([a]), np.array([b]), np.array([-1]))
    t0 = np.maximum(tl.bounds[k], a)
    t1 = np.minimum(tl.bounds[k + 1], b)
    t0[0], t1[-1] = a, b
    return np.full(len(k), rank), t0, t1, tl.label[k]


def critical_path_summary(trace: Trace, path: Any = None) -> Any:
    """The critical path per (rank, callpath): ``time`` on the path (seconds),
    of which ``mpi`` in MPI calls, and ``share`` of the path's length;
    largest first. ``path``: critical_path(trace), if already computed."""
    path = critical_path(trace) if path is None else path
    path = path.assign(mpi=path["duration"].where(path["op"] != "", 0.0))
    table = path.groupby(["rank", "callpath"], sort=False).agg(
        time=("duration", "sum"), mpi=("mpi", "sum")).reset_index()
    length = path_length(path)
    table["share"] = table["time"] / length if length > 0 else 0.0
    return table.sort_values(["time", "rank"], ascending=[False, True],
                             kind="stable").reset_index(drop=True)


# -- the ideal network (Dimemas-style replay) ------------------------------------------

def _partners(trace: Trace, on_main: np.ndarray
              ) -> Tuple[Dict[int, List[int]], np.ndarray, np.ndarray, np.ndarray]:
    """What each MPI call of a main thread waits for on an ideal network:
    the calls whose start it needs (the sends of the messages it completes;
    a broadcast's or scatter's root); the collective instance it takes part
    in (-1: none) and whether it needs all of its members; each instance's
    member count."""
    c, m = trace.calls, trace.msgs
    need: Dict[int, List[int]] = {}
    for send, recv in zip(m["send"].tolist(), m["recv"].tolist()):
        if on_main[send] and on_main[recv] and send != recv:
            need.setdefault(recv, []).append(send)
    inst, ninst = collective_instances(trace)
    inst = np.where(on_main, inst, -1)
    whole = np.zeros(len(c["op"]), bool)
    members = np.zeros(ninst, np.int64)
    if ninst:
        sel = np.flatnonzero(inst >= 0)
        members = np.bincount(inst[sel], minlength=ninst)
        is_root = c["root"][sel] == c["rank"][sel]
        to_all = _op_mask(trace, ALL_TO_ALL)[sel]
        gather = _op_mask(trace, ALL_TO_ONE)[sel] & is_root
        whole[sel[to_all | gather]] = True
        root_call = np.full(ninst, -1, np.int64)
        root_call[inst[sel[is_root]]] = sel[is_root]
        one = _op_mask(trace, ONE_TO_ALL)[sel] & ~is_root & (root_call[inst[sel]] >= 0)
        for call, root in zip(sel[one].tolist(), root_call[inst[sel[one]]].tolist()):
            need.setdefault(call, []).append(root)
    return need, inst, whole, members


def ideal_replay(trace: Trace) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The run replayed on an ideal network (zero latency, infinite
    bandwidth), as Dimemas does for POP: each rank's main thread computes
    as recorded between its MPI calls, and an MPI call takes no time but
    waits for what it needs: a receive (or the Wait* completing it) for its
    message's send to start, a collective for its last member to arrive (a
    broadcast's non-root for the root, a reduce's root for every member).
    Sends never wait. Returns per call its ideal start and end (``unit``,
    NaN for calls of other threads) and per rank the main thread (as
    ``main_threads``). ValueError when the calls cannot be replayed (a
    receive whose send never comes: a truncated trace)."""
    c = trace.calls
    n = len(c["op"])
    main = main_threads(trace)
    on_main = np.zeros(n, bool)
    if n:
        on_main = main[c["rank"]] == c["thread"]
    need, inst, whole, members = _partners(trace, on_main)
    start = np.full(n, np.nan)
    end = np.full(n, np.nan)
    arrived = np.zeros(len(members), np.int64)
    last = np.full(len(members), -np.inf)
    queues = {}
    clock = {}
    for r in range(trace.nranks):
        if main[r] < 0:
            continue
        e, k = _rows(trace.ev, r, int(main[r])), _rows(c, r, int(main[r]))
        lo = int(min(trace.ev["start"][e].min(initial=_MAX), c["start"][k].min(initial=_MAX)))
        queues[r] = k.tolist()
        clock[r] = [float(lo), lo]          # ideal time, real time at the last call's end
    pos = dict.fromkeys(queues, 0)
    active = list(queues)
    while active:
        moved = False
        for r in active:
            q, (ideal, real) = queues[r], clock[r]
            while pos[r] < len(q):
                k = q[pos[r]]
                i = inst[k]
                if np.isnan(start[k]):
                    start[k] = ideal + (c["start"][k] - real)
                    if i >= 0:
                        arrived[i] += 1
                        last[i] = max(last[i], start[k])
                waits = need.get(k, ())
                if any(np.isnan(start[p]) for p in waits) or (whole[k] and arrived[i] < members[i]):
                    break
                end[k] = max([start[k], *(start[p] for p in waits), *((last[i],) if whole[k] else ())])
                ideal, real = end[k], int(c["end"][k])
                pos[r] += 1
                moved = True
            clock[r] = [ideal, real]
        active = [r for r in active if pos[r] < len(queues[r])]
        if active and not moved:
            r = active[0]
            raise ValueError(f"the trace cannot be replayed: rank {r}'s "
                             f"{trace.ops[c['op'][queues[r][pos[r]]]]} waits for a call "
                             "that never comes (a trace cut by trace_limit?)")
    return start, end, main


def ideal_inclusive(trace: Trace) -> np.ndarray:
    """Per (callpath, rank), in seconds: the inclusive time of the callpath's
    occurrences on the ideal network (``ideal_replay``); an occurrence of
    another thread than the rank's main one keeps its recorded time."""
    start, end, main = ideal_replay(trace)
    ev, c = trace.ev, trace.calls
    t0, t1 = ev["start"].astype(np.float64), ev["end"].astype(np.float64)
    for r in range(trace.nranks):
        if main[r] < 0:
            continue
        e, k = _rows(ev, r, int(main[r])), _rows(c, r, int(main[r]))
        if not len(e):
            continue
        k = k[np.argsort(c["start"][k], kind="stable")]
        real_start, real_end = c["start"][k], c["end"][k]
        lo = int(min(ev["start"][e].min(), real_start.min(initial=_MAX)))
        for times in (t0, t1):
            t = times[e].astype(np.int64)
            nxt = np.searchsorted(real_end, t, side="right")        # the first call ending after t
            inside = (nxt < len(k)) & (real_start[np.minimum(nxt, len(k) - 1)] <= t) if len(k) \
                else np.zeros(len(t), bool)
            prev = nxt - 1
            base = np.where(prev >= 0, end[k[np.maximum(prev, 0)]] if len(k) else 0.0, float(lo))
            since = t - np.where(prev >= 0, real_end[np.maximum(prev, 0)] if len(k) else 0, lo)
            mapped = base + since
            if inside.any():
                i = k[nxt[inside]]
                mapped[inside] = start[i] + np.minimum(t[inside] - c["start"][i], end[i] - start[i])
            times[e] = mapped
    out = np.zeros((len(trace.callpaths), trace.nranks))
    np.add.at(out, (ev["path"], ev["rank"]), t1 - t0)
    return out * SECONDS[trace.unit]
