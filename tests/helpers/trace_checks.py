"""Checks of a real traced run's analysis against the run's own records.

Real ranks on a loaded machine sleep, wake and arrive in any order, so the
tests of real runs bound no duration and assume no order of arrival: they
check what holds for any timing. The critical path is contiguous; each wait
is what the records say (a late sender: its send began after the receive;
a collective: the last rank to arrive began after this one), and the path
crosses to the rank that arrived last. The exact values of the analysis on
made-up records are tested in tests/analysis/test_trace_analysis.py.

Used by tests/mpi/test_mpi_trace_analysis.py and tests/native/test_native_trace.py.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Dict, List, Tuple

import numpy as np

NS = 1e-9
EXACT = 1e-9          # seconds: the values are ints of ns, summed as floats


def _ops(trace) -> np.ndarray:
    return np.array(trace.ops, object)[trace.calls["op"]]


def _callpath(trace, path: int) -> Tuple[str, ...]:
    return tuple(trace.callpaths[path]) if path >= 0 else ()


def expected_waits(trace) -> Dict[Tuple[Tuple[str, ...], int, str], float]:
    """Seconds of waiting per (callpath, rank, kind), from the records: a
    receive waits for a send that began after it did, a blocking send for a
    receive begun after it (if the send had not ended); an Allreduce, for the
    rank that began the same instance (the k-th on each rank) last. Each
    wait at most the call's own length."""
    c, m = trace.calls, trace.msgs
    start, end, ops = c["start"], c["end"], _ops(trace)
    waits: Dict[Tuple[Tuple[str, ...], int, str], float] = defaultdict(float)

    def add(call: int, partner_start: int, kind: str) -> None:
        wait = min(max(partner_start - start[call], 0), end[call] - start[call])
        if wait:
            waits[_callpath(trace, c["path"][call]), int(c["rank"][call]), kind] += wait * NS

    for send, recv in zip(m["send"].tolist(), m["recv"].tolist()):
        add(recv, start[send], "late_sender")
        if ops[send] == "Send" and end[send] > start[recv]:     # a blocking send waits for
            add(send, start[recv], "late_receiver")             # a receive begun after it
    for inst in allreduces(trace):
        last = max(start[i] for i in inst)
        for i in inst:
            add(i, last, "wait_collective")
    return dict(waits)


def allreduces(trace) -> List[List[int]]:
    """The Allreduce calls of each instance: the k-th of every rank."""
    c, ops = trace.calls, _ops(trace)
    per_rank = [np.flatnonzero((c["rank"] == r) & (ops == "Allreduce")) for r in range(trace.nranks)]
    per_rank = [calls[np.argsort(c["start"][calls], kind="stable")] for calls in per_rank]
    counts = {len(calls) for calls in per_rank}
    assert len(counts) == 1, f"Allreduce calls per rank: {[len(x) for x in per_rank]}"
    return [[int(calls[k]) for calls in per_rank] for k in range(counts.pop())]


def last_arrivals(trace) -> List[int]:
    """Per Allreduce instance, the rank that began it last."""
    c = trace.calls
    return [int(c["rank"][max(inst, key=lambda i: c["start"][i])]) for inst in allreduces(trace)]


def check(profile) -> List[str]:
    """What is wrong with the analysis of a traced run: [] if nothing."""
    errors = []
    trace = profile.trace
    path = profile.critical_path()
    starts, durations = path["start"].to_numpy(), path["duration"].to_numpy()
    if len(path) == 0 or (durations < 0).any():
        errors.append(f"path segments of lengths {durations.tolist()}")
    elif not np.allclose(starts[1:], starts[:-1] + durations[:-1], rtol=0, atol=EXACT):
        errors.append("the path is not contiguous")
    elif abs(durations.sum() - (trace.wall_time * NS - starts[0])) > EXACT * len(path):
        errors.append(f"path {durations.sum()} s, wall time {trace.wall_time * NS} s "
                      f"from its start {starts[0]}")
    got = {}
    for w in profile.wait_states().itertuples():
        for kind in ("late_sender", "late_receiver", "wait_collective", "wait_barrier"):
            if getattr(w, kind):
                got[w.callpath, w.rank, kind] = getattr(w, kind)
    want = expected_waits(trace)
    if got.keys() != want.keys() or any(abs(got[k] - want[k]) > EXACT * 8 for k in want):
        errors.append(f"wait states {got}, expected from the records {want}")
    return errors


def ranks_on_path(profile, callpath: Tuple[str, ...]) -> List[int]:
    """The ranks of the path's segments in ``callpath``, in time order."""
    path = profile.critical_path()
    return path[path["callpath"].map(callpath.__eq__)]["rank"].tolist()
