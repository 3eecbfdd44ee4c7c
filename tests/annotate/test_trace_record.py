"""Trace mode on one process: what the hot paths record, the ``trace``
section codec (docs/format.md#the-trace-section) and the flush that writes it.

The MPI side (clock alignment, blocks of many ranks, trace-off files equal
to the golden file) is in tests/mpi/test_trace.py.
"""
from __future__ import annotations

import itertools
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tinyprof
from tinyprof.annotate import pyevent
from tinyprof.errors import FormatError
from tinyprof.format.reader import parse_file
from tinyprof.format.trace_section import NONE, encode, make_block, parse

core = pytest.importorskip("tinyprof.annotate._core", reason="the C core was not built")
BOTH = [core, pyevent]


def quads(mod) -> list:
    raw, dropped = mod.trace_records()
    return np.frombuffer(raw, np.int64).reshape(-1, 4).tolist(), dropped


@pytest.mark.parametrize("mod", BOTH, ids=["core", "pure"])
def test_hot_paths_record_start_and_duration_of_each_occurrence(mod):
    ticks = itertools.count(100, 10)                # enter/exit read the clock once each
    mod.reset()
    mod.set_clock(lambda: next(ticks))
    try:
        mod.trace(10)
        with mod.Event("a"):                        # start 100
            with mod.Event("b"):                    # 110 .. 120
                pass
        f = mod.Event("c")(lambda: None)
        f()                                         # 140 .. 150
        a, b, c = (mod.root().children["a"], mod.root().children["a"].children["b"],
                   mod.root().children["c"])
        tid = threading.get_native_id()
        assert quads(mod) == ([[b.id, tid, 110, 10], [a.id, tid, 100, 30],
                               [c.id, tid, 140, 10]], 0)
        mod.trace(0)                                # off: nothing more, the records stay
        f()
        assert len(quads(mod)[0]) == 3
        mod.trace(4)
        for _ in range(3):
            f()
        assert (len(quads(mod)[0]), quads(mod)[1]) == (4, 2)   # the limit counts the rest
        mod.reset()
        assert quads(mod) == ([], 0)
    finally:
        mod.trace(0)
        mod.set_clock(None)
        mod.reset()


@pytest.mark.parametrize("mod", BOTH, ids=["core", "pure"])
def test_threads_are_told_apart(mod):
    mod.reset()
    mod.trace(100)
    try:
        def work():
            with mod.Event("w"):
                pass
        t = threading.Thread(target=work)
        t.start()
        t.join()
        work()
        tids = [row[1] for row in quads(mod)[0]]
        assert len(tids) == 2 and tids[1] == threading.get_native_id() and tids[0] != tids[1]
    finally:
        mod.trace(0)
        mod.reset()


# -- codec ---------------------------------------------------------------------------

def sample_block():
    events = np.array([[101, 0, 1000, 500], [101, 1, 1100, 100], [105, 2, 1050, 20],
                       [101, 1, 1300, 100], [105, 0, 1000, 500]])
    calls = np.array([[101, 1, 1110, 50, 0, 8, NONE], [105, NONE, 1055, 5, NONE, 0, NONE],
                      [101, 1, 1310, 20, 2, 16, 1]])
    eps = np.array([[0, 0, 3, 7, 8, 0], [1, 1, 2, 7, 8, 0], [1, 1, 3, 9, 4, 2]])
    return make_block(2, (1000, -5, 2000, -7, 3), events, calls, ["Send", "Wait", "Bcast"],
                      eps, ["COMM_WORLD", "unused", "COMM_WORLD.split1@2"], (4, 1))


SAMPLE = b"""rank 2
clock 1000|-5|2000|-7|3
threads 2|101|105
comms 2|COMM_WORLD|COMM_WORLD.split1@2
events 5|4
0|0|1000|500
1|0|0|500
1|2|50|20
0|1|50|100
0|1|200|100
calls 3|1
1||1055|5|Wait||0||r2:7:8:0,r3:9:4:1
0|1|55|50|Send|0|8||s3:7:8:0
0|1|200|20|Bcast|1|16|1|
"""


def test_block_encodes_as_documented():
    """Sorted by (start, thread, longest first); threads and communicators
    indexed; starts as deltas; the endpoints follow their call."""
    assert encode([sample_block()]) == SAMPLE


def test_block_reads_back():
    (b,) = parse(SAMPLE, "f.tp", 40, 3, 0, 4, 4)
    assert (b.rank, b.clock, b.threads, b.comms, b.dropped, b.line) == (
        2, (1000, -5, 2000, -7, 3), [101, 105], ["COMM_WORLD", "COMM_WORLD.split1@2"],
        (4, 1), 40)
    assert b.events.tolist() == [[0, 0, 1000, 500], [1, 0, 1000, 500], [1, 2, 1050, 20],
                                 [0, 1, 1100, 100], [0, 1, 1300, 100]]
    assert b.ops == ["Wait", "Send", "Bcast"]
    assert b.calls.tolist() == [[1, NONE, 1055, 5, 0, NONE, 0, NONE],
                                [0, 1, 1110, 50, 1, 0, 8, NONE],
                                [0, 1, 1310, 20, 2, 1, 16, 1]]
    assert b.endpoints.tolist() == [[0, 1, 2, 7, 8, 0], [0, 1, 3, 9, 4, 1], [1, 0, 3, 7, 8, 0]]
    assert encode([b]) == SAMPLE
    np.testing.assert_array_equal(b.global_times(np.array([1000, 1500, 2000])),
                                  [995, 1494, 1993])


@pytest.mark.parametrize("old,new,line,problem", [
    (b"rank 2", b"rank 5", 40, "rank 5 is not a later rank"),
    (b"clock 1000|-5", b"clock 1000|-05", 41, "expected 'clock"),
    (b"threads 2|101|105", b"threads 2|105|101", 42, "not ascending"),
    (b"comms 2|", b"comms 3|", 43, "says 3 items"),
    (b"events 5|4", b"events 6|4", 50, "bad event row"),
    (b"1|2|50|20", b"1|2|050|20", 47, "bad event row"),
    (b"1|2|50|20", b"2|2|50|20", 47, "unknown thread or event line"),
    (b"0|1|50|100", b"0|3|50|100", 48, "unknown thread or event line"),
    (b"|Wait||0||", b"|wait||0||", 51, "bad call row"),
    (b"|Send|0|", b"|Send|2|", 52, "unknown thread, line, communicator"),
    (b"r3:9:4", b"r4:9:4", 51, "bad endpoint"),
    (b"s3:7:8", b"x3:7:8", 52, "bad endpoint"),
    (b"r3:9:4:1", b"r3:9:4:2", 51, "bad endpoint"),
    (b"0|1|200|100\n", b"0|1|9223372036854775000|100\n", 49, "exceed 2^63-1"),
])
def test_bad_blocks_name_the_line(old, new, line, problem):
    bad = SAMPLE.replace(old, new, 1)
    with pytest.raises(FormatError) as e:
        parse(bad, "f.tp", 40, 3, 0, 4, 4)
    assert (e.value.path, e.value.line) == ("f.tp", line) and problem in e.value.problem


def test_truncated_payload_is_an_error():
    for cut in range(1, len(SAMPLE)):
        try:
            blocks = parse(SAMPLE[:cut], "f.tp", 1, 3, 0, 4, 4)
        except FormatError:
            continue
        assert encode(blocks) == SAMPLE[:cut]       # only at a block or row boundary
        assert SAMPLE[:cut].endswith(b"\n")


naturals = st.integers(0, 10 ** 12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([7, 9, 40000]), st.integers(0, 5), naturals, naturals),
                max_size=30),
       st.lists(st.tuples(st.sampled_from([7, 9]), st.integers(-1, 5), naturals, naturals,
                          st.integers(-1, 2), naturals, st.integers(-1, 3),
                          st.sampled_from(["Send", "Recv", "Allreduce", "Waitall"])),
                max_size=20),
       st.integers(-10 ** 9, 10 ** 9))
def test_random_blocks_round_trip(events, calls, offset):
    ev = np.array(events, np.int64).reshape(-1, 4)
    rows = np.array([c[:7] for c in calls], np.int64).reshape(-1, 7)
    eps = np.array([(i, i % 2, i % 4, i, 2 * i, i % 3) for i in range(len(calls))], np.int64)
    b = make_block(1, (5, offset, 9, offset, 0), ev, rows, [c[7] for c in calls], eps,
                   ["A", "B", "C"])
    data = encode([b])
    (back,) = parse(data, "f", 1, 6, 0, 4, 4)
    assert encode([back]) == data
    # the rows are the input's, reordered: same multiset of (tid, line, start, dur)
    tids = np.array(back.threads)[back.events[:, 0]] if len(ev) else np.zeros(0, np.int64)
    got = sorted(map(tuple, np.column_stack([tids, back.events[:, 1:]]).tolist())) \
        if len(ev) else []
    assert got == sorted(map(tuple, ev.tolist()))
    assert np.all(np.diff(back.events[:, 2]) >= 0) and np.all(np.diff(back.calls[:, 2]) >= 0)
    assert len(back.endpoints) == len(calls)


def test_many_rows_encode_as_one_piece():
    """Rows are encoded a chunk at a time: every start is still relative to
    the row before it, across the chunks' borders too."""
    n = 150_000
    rng = np.random.default_rng(3)
    start = np.cumsum(rng.integers(0, 50, n))
    ev = np.column_stack([rng.choice([11, 5], n), rng.integers(0, 3, n), start,
                          rng.integers(0, 9, n)])
    b = make_block(0, (0, 0, 0, 0, 0), ev, np.zeros((0, 7), np.int64), [],
                   np.zeros((0, 6), np.int64), [])
    rows = b.events
    assert b.threads == [5, 11]
    assert rows[:, 0].tolist() == [b.threads.index(t) for t in ev[np.lexsort(
        (-ev[:, 3], ev[:, 0], ev[:, 2])), 0].tolist()]
    d = np.diff(rows[:, 2], prepend=0)
    want = "".join(f"{t}|{ln}|{s}|{u}\n" for t, ln, s, u in
                   zip(rows[:, 0].tolist(), rows[:, 1].tolist(), d.tolist(), rows[:, 3].tolist()))
    data = encode([b])
    assert data.endswith(f"events {n}|0\n{want}calls 0|0\n".encode())


# -- the flush of one process ------------------------------------------------------------

def test_flush_writes_the_trace_section(clock, tmp_path):
    tinyprof.Profiler("tr", outdir=str(tmp_path), trace=True)
    for _ in range(2):
        with tinyprof.Event("main"):
            clock.tick(5)
            with tinyprof.Event("step"):
                clock.tick(10)
    tinyprof.flush()
    (path,) = tmp_path.glob("*.tp")
    f = parse_file(str(path))
    (b,) = parse(f.sections["trace"], str(path), f.section_lines["trace"], len(f.parents),
                 0, 1, 1)
    main, step = f.paths.index(("main",)), f.paths.index(("main", "step"))
    start = b.events[0, 2]
    assert (b.events - [0, 0, start, 0]).tolist() == [
        [0, main, 0, 15], [0, step, 5, 10], [0, main, 15, 15], [0, step, 20, 10]]
    assert b.clock[1::2] == (0, 0) and b.clock[4] == 0 and b.threads == [threading.get_native_id()]
    assert len(b.calls) == 0


def test_trace_off_writes_no_section(clock, tmp_path):
    tinyprof.Profiler("tr", outdir=str(tmp_path))
    with tinyprof.Event("main"):
        clock.tick(5)
    tinyprof.flush()
    (path,) = tmp_path.glob("*.tp")
    sections = [line.split()[1] for line in path.read_bytes().splitlines() if line.startswith(b"section ")]
    assert sections == [b"meta"]            # the run metadata only


def test_settings_validate_trace(monkeypatch):
    with pytest.raises(TypeError):
        tinyprof.Profiler("x", trace="yes")
    with pytest.raises(ValueError):
        tinyprof.Profiler("x", trace=True, trace_limit=0)
    monkeypatch.setenv("TINYPROF_TRACE", "1")
    monkeypatch.setenv("TINYPROF_TRACE_LIMIT", "77")
    p = tinyprof.Profiler("x")
    assert (p.trace, p.settings.trace_limit) == (True, 77)
    monkeypatch.setenv("TINYPROF_TRACE_LIMIT", "lots")
    with pytest.raises(ValueError, match="TINYPROF_TRACE_LIMIT"):
        tinyprof.Profiler("x")
