"""The trace analysis on hand-made traces whose critical path and wait
states are known exactly: message matching, Scalasca's wait-state patterns,
the backward replay of the critical path (docs/trace.md). Runs on real MPI
ranks are in tests/mpi/test_mpi_trace.py."""
from __future__ import annotations

from typing import List

import numpy as np
import pytest
from helpers.traces import make_trace

from tinyprof.analysis import trace as _trace

NS = 1e-9


def segments(trace) -> List[tuple]:
    path = _trace.critical_path(trace)
    return [(r.rank, "<".join(r.callpath), r.op, round(r.start / NS), round(r.duration / NS))
            for r in path.itertuples()]


def waits(trace) -> dict:
    table = _trace.wait_states(trace)
    return {("<".join(r.callpath), r.rank): tuple(round(getattr(r, k) / NS) for k in
                                                  _trace.WAIT_KINDS) for r in table.itertuples()}


def pipeline(nranks: int, work: int = 10) -> _trace.Trace:
    """A token passed 0 -> 1 -> ... : rank r posts its Recv at 0, gets the token
    when r-1 sends it, computes ``work`` ns, sends it on (1 ns each)."""
    events, calls = [], []
    t = 0
    for r in range(nranks):
        events.append((r, ("main",), 0, 1000))
        if r:
            calls.append((r, ("main",), "Recv", 0, t + 1, [("r", r - 1, 5, 8)]))
            t += 1
        events.append((r, ("main", "work"), t, t + work))
        t += work
        if r < nranks - 1:
            calls.append((r, ("main",), "Send", t, t + 1, [("s", r + 1, 5, 8)]))
        events[-2] = (r, ("main",), 0, t + 1 if r < nranks - 1 else t)
    return make_trace(nranks, events, calls)


def test_a_token_pipeline_puts_every_rank_on_the_path_in_turn():
    trace = pipeline(3)
    # rank 0 works [0, 10], sends at [10, 11]; rank 1 receives at 11 ... rank 2 ends at 32
    assert segments(trace) == [
        (0, "main<work", "", 0, 10),
        (1, "main", "Recv", 10, 1),        # the receive, from the send's start
        (1, "main<work", "", 11, 10),
        (2, "main", "Recv", 21, 1),
        (2, "main<work", "", 22, 10)]
    assert waits(trace) == {("main", 1): (10, 0, 0, 0), ("main", 2): (21, 0, 0, 0)}
    path = _trace.critical_path(trace)
    assert path["duration"].sum() == pytest.approx(trace.wall_time * NS)
    # summed in ticks, so never above the wall time by a rounding
    assert _trace.path_length(path) == trace.wall_time * _trace.SECONDS[trace.unit]


def test_the_last_arrival_at_a_collective_holds_the_others_up():
    """Rank 1 computes 10x longer; the others wait in the Allreduce."""
    events, calls = [], []
    for r in range(3):
        work = 100 if r == 1 else 10
        events += [(r, ("main",), 0, 110), (r, ("main", "solve"), 0, work)]
        calls.append((r, ("main",), "Allreduce", work, 110))
    trace = make_trace(3, events, calls)
    # all end at 110: the path starts back from the lowest rank, 0
    assert segments(trace) == [(1, "main<solve", "", 0, 100), (0, "main", "Allreduce", 100, 10)]
    assert waits(trace) == {("main", 0): (0, 0, 90, 0), ("main", 2): (0, 0, 90, 0)}
    summary = _trace.critical_path_summary(trace)
    top = summary.iloc[0]
    assert (top["rank"], top["callpath"], top["share"]) == (1, ("main", "solve"),
                                                            pytest.approx(100 / 110))


def test_a_barrier_reached_late_is_a_wait_at_barrier_and_jumps_to_the_late_rank():
    events = [(0, ("main",), 0, 60), (1, ("main",), 0, 60), (1, ("main", "io"), 0, 50)]
    calls = [(0, ("main",), "Barrier", 5, 60), (1, ("main",), "Barrier", 50, 60)]
    trace = make_trace(2, events, calls)
    assert waits(trace) == {("main", 0): (0, 0, 0, 45)}
    assert segments(trace) == [(1, "main<io", "", 0, 50), (0, "main", "Barrier", 50, 10)]


def test_a_late_root_of_a_broadcast_and_an_early_root_of_a_reduce():
    events = [(r, ("main",), 0, 100) for r in range(3)]
    calls = [(0, ("main",), "Bcast", 30, 40, 0), (1, ("main",), "Bcast", 0, 41, 0),
             (2, ("main",), "Bcast", 5, 42, 0),
             (0, ("main",), "Reduce", 40, 90, 0), (1, ("main",), "Reduce", 80, 90, 0),
             (2, ("main",), "Reduce", 45, 50, 0)]
    w = waits(make_trace(3, events, calls))
    assert w == {("main", 1): (0, 0, 30, 0), ("main", 2): (0, 0, 25, 0),
                 ("main", 0): (0, 0, 40, 0)}


def test_a_blocking_send_that_waits_for_a_late_receiver():
    events = [(0, ("main",), 0, 30), (1, ("main",), 0, 30), (1, ("main", "busy"), 0, 15)]
    calls = [(0, ("main",), "Send", 2, 20, [("s", 1, 0, 8)]),
             (1, ("main",), "Recv", 15, 20, [("r", 0, 0, 8)])]
    trace = make_trace(2, events, calls)
    assert waits(trace) == {("main", 0): (0, 13, 0, 0)}
    # rank 0 finished last (tie: the lower rank); its send waited for rank 1's receive
    assert segments(trace)[:2] == [(1, "main<busy", "", 0, 15), (0, "main", "Send", 15, 5)]


def test_messages_match_in_order_per_sender_receiver_and_tag():
    calls = [(0, ("m",), "Send", 0, 1, [("s", 1, 1, 10)]), (0, ("m",), "Send", 2, 3, [("s", 1, 2, 20)]),
             (0, ("m",), "Send", 4, 5, [("s", 1, 1, 30)]),
             (1, ("m",), "Recv", 0, 6, [("r", 0, 2, 20)]),
             (1, ("m",), "Waitall", 7, 9, [("r", 0, 1, 10), ("r", 0, 1, 30)])]
    trace = make_trace(2, [(0, ("m",), 0, 9), (1, ("m",), 0, 9)], calls)
    m = trace.msgs
    got = sorted(zip(m["send"].tolist(), m["recv"].tolist(), m["tag"].tolist(),
                     m["bytes"].tolist()))
    assert got == [(0, 4, 1, 10), (1, 3, 2, 20), (2, 4, 1, 30)]


def test_the_path_is_contiguous_and_as_long_as_the_run_on_a_random_bsp_trace():
    rng = np.random.default_rng(5)
    events, calls, now = [], [], np.zeros(4, np.int64)
    for step in range(30):
        for r in range(4):
            work = int(rng.integers(1, 100))
            events.append((r, ("main", "step"), int(now[r]), int(now[r]) + work))
            now[r] += work
        # a ring exchange, then an allreduce
        for r in range(4):
            calls.append((r, ("main",), "Sendrecv", int(now[r]), int(now[r]) + 5,
                          [("s", (r + 1) % 4, step, 8), ("r", (r - 1) % 4, step, 8)]))
        done = max(int(now[r]) + 5 for r in range(4))
        for r in range(4):
            calls.append((r, ("main",), "Allreduce", int(now[r]) + 5, done + 3))
        now[:] = done + 3
    trace = make_trace(4, [(r, ("main",), 0, int(now[r])) for r in range(4)] + events, calls)
    path = _trace.critical_path(trace)
    starts, ends = path["start"].to_numpy(), (path["start"] + path["duration"]).to_numpy()
    assert np.allclose(starts[1:], ends[:-1])
    assert path["duration"].sum() == pytest.approx(trace.wall_time * NS)
    assert (path["duration"] > 0).all()
    # every Allreduce on the path is its instance's last arrival's, or its end
    table = _trace.wait_states(trace)
    assert (table["total"] >= 0).all() and table["wait_collective"].sum() > 0


def test_a_profile_without_trace_says_so(tmp_path):
    import tinyprof
    from tinyprof import annotate
    annotate.impl.reset()
    tinyprof.Profiler("plain", outdir=str(tmp_path / "p"))
    with tinyprof.Event("a"):
        pass
    tinyprof.flush()
    with pytest.raises(ValueError, match="no trace: record with Profiler"):
        tinyprof.read(str(tmp_path / "p")).critical_path()
