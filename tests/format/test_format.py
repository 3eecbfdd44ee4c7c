"""The file format, writer to reader (docs/format.md).

Property tests build multi-rank, multi-file profiles with ``assemble.build_file``
and check that read() gives back exactly what each rank recorded, per
execution and occurrence: from LocalEvent objects made up directly (any int64
time, any double), and from random programs run through the hot path.
"""
from __future__ import annotations

import math
import os
import struct
import tempfile
import zlib
from typing import Dict, List, Optional, Tuple

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tinyprof
from tinyprof import annotate
from tinyprof.format import encoding, output_dir
from tinyprof.format import reader as _reader
from tinyprof.format.encoding import Header, escape, format_value, unescape
from tinyprof.format.output_dir import file_name
from tinyprof.runtime import assemble
from tinyprof.runtime import collect as _collect
from tinyprof.runtime.collect import LocalEvent

impl = annotate.impl
PROPERTY = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])
CREATED = "2000-01-01T00:00:00Z"


def bits(x: float) -> bytes:
    """Identity of a double: tells -0.0 from 0.0 and keeps NaN equal to NaN."""
    return b"nan" if x != x else struct.pack("<d", x)


# -- escaping ------------------------------------------------------------------

@pytest.mark.parametrize("text,name,key", [
    ("plain", "plain", "plain"),
    ("", "", ""),
    ("100%", "100%25", "100%25"),
    ("a\nb\rc", "a%0Ab%0Dc", "a%0Ab%0Dc"),
    ("k:v, w", "k:v, w", "k%3Av%2C%20w"),
    ("|<+-;", "|<+-;", "|<+-;"),
    ("\u2028\x85é", "\u2028\x85é", "\u2028\x85é"),
    ("%25", "%2525", "%2525"),
])
def test_escape(text, name, key):
    assert escape(text) == name
    assert escape(text, key=True) == key
    assert unescape(name) == unescape(key) == text


@pytest.mark.parametrize("bad", ["%", "%4", "%zz", "a%g0", "%%"])
def test_unescape_rejects_malformed_escapes(bad):
    with pytest.raises(ValueError):
        unescape(bad)


def test_unescape_accepts_lowercase_hex():
    assert unescape("%0a%0d%2c") == "\n\r,"


@given(st.text(st.characters(exclude_categories=())), st.booleans())
@PROPERTY
def test_escape_roundtrip(text, key):
    out = escape(text, key)
    assert "\n" not in out and "\r" not in out
    if key:
        assert not set(":, ") & set(out)
    assert unescape(out) == text


# -- canonical numbers ----------------------------------------------------------

@pytest.mark.parametrize("value,text", [
    (0.0, "0"), (-0.0, "-0"), (4096.0, "4096"), (-7.0, "-7"), (3, "3"),
    (9999999999999998.0, "9999999999999998"), (1e16, "1e16"), (2.5e16, "2.5e16"),
    (0.25, "0.25"), (0.0001, "0.0001"), (1.5e-7, "1.5e-7"), (1e-5, "1e-5"),
    (123456789012345.6, "123456789012345.6"), (1e300, "1e300"),
    (-1.7976931348623157e308, "-1.7976931348623157e308"), (5e-324, "5e-324"),
    (float("nan"), "nan"), (float("inf"), "inf"), (float("-inf"), "-inf"),
])
def test_format_value_canonical_forms(value, text):
    assert format_value(value) == text


@given(st.floats())
@PROPERTY
def test_format_value_roundtrips_and_has_no_separators(x):
    text = format_value(x)
    assert bits(float(text)) == bits(x)
    assert not set("|;+,") & set(text) and "e+" not in text
    mantissa, _, exp = text.partition("e")
    assert not exp.lstrip("-").startswith("0")


# -- random profiles --------------------------------------------------------------

NAMES = st.one_of(
    st.sampled_from(["", "|", "<", "+", "-", ",", ";", "%", "\n", "\r", "\r\n", "\u2028",
                     "%25", "0<1", "a|b", "end", "names 3", " ", "\ud800"]),
    st.text(st.characters(exclude_categories=()), max_size=5))
TIMES = st.integers(-2**63, 2**63 - 1)
VALUES = st.floats()                     # NaN, infinities, -0.0, subnormals included


@st.composite
def trees(draw) -> List[Tuple[Tuple[str, ...], int]]:
    """Callpaths of a random call tree in pre-order, each with its loop mode."""
    nodes: List[Tuple[Tuple[str, ...], int]] = []
    for _ in range(draw(st.integers(1, 8))):
        parent = draw(st.sampled_from([()] + [p for p, _ in nodes]))
        path = parent + (draw(NAMES),)
        if all(p != path for p, _ in nodes):
            nodes.append((path, draw(st.integers(0, 2))))
    return sorted(nodes, key=lambda n: _preorder_key(nodes, n[0]))


def _preorder_key(nodes, path):
    # position of each prefix among its siblings, in creation order
    order = {p: i for i, (p, _) in enumerate(nodes)}
    return [order[path[:k]] for k in range(1, len(path) + 1)]


@st.composite
def rank_events(draw, tree, consistent_keys, inconsistent_keys):
    """One rank: its executions and LocalEvents over a prefix-closed part of ``tree``."""
    nexec = draw(st.integers(0, 3))
    chosen = {p for p, _ in tree if draw(st.booleans())}
    events = []
    for path, loop in tree:
        if not any(c[:len(path)] == path for c in chosen):
            continue                                  # keep the set prefix-closed
        per_exec = [draw(st.lists(TIMES, max_size=1 if loop == 2 else 3)) for _ in range(nexec)]
        times = [t for ex in per_exec for t in ex]
        execs, start = [], 0
        for e, ex in enumerate(per_exec):
            if ex:
                execs += [e, start]
            start += len(ex)
        metrics = {}
        for key in inconsistent_keys:
            if times and draw(st.booleans()):
                metrics[key] = np.array(draw(st.lists(VALUES, min_size=len(times), max_size=len(times))))
        consistent = {k: draw(VALUES) for k in consistent_keys if draw(st.booleans())}
        events.append(LocalEvent(path, loop, True, np.array(times, dtype=np.int64),
                                 np.array(execs, dtype=np.int64), consistent, metrics))
    return nexec, events


@st.composite
def profiles(draw):
    """(header metrics, [(executions, events) per rank], file split points, name)."""
    keys = draw(st.lists(NAMES.filter(lambda k: k != "time"), unique=True, max_size=3))
    metrics = [(k, draw(st.booleans())) for k in keys]
    tree = draw(trees())
    cons = [k for k, c in metrics if c]
    incons = [k for k, c in metrics if not c]
    ranks = draw(st.lists(rank_events(tree, cons, incons), min_size=1, max_size=5))
    splits = sorted(draw(st.sets(st.integers(1, len(ranks) - 1))) if len(ranks) > 1 else set())
    return metrics, ranks, splits, draw(NAMES)


def write_profile(directory: str, name: str, metrics, ranks, splits) -> None:
    """Write ``ranks`` as a set of files, one per block between ``splits``."""
    bounds = [0, *splits, len(ranks)]
    nfiles = len(bounds) - 1
    for i in range(nfiles):
        block = ranks[bounds[i]:bounds[i + 1]]
        header = Header(name=name, nranks=len(ranks), first_rank=bounds[i], rank_count=len(block),
                        file_index=i, file_count=nfiles, metrics=list(metrics), created=CREATED)
        data = assemble.build_file(header, [ev for _, ev in block], [n for n, _ in block])
        output_dir.write_atomic(os.path.join(directory, file_name(name, i, nfiles)), data)


def expected_series(nexec: int, event: Optional[LocalEvent], column=None) -> List[List]:
    """Per execution, the values recorded (``column``: a metric array, else times)."""
    out: List[List] = [[] for _ in range(nexec)]
    if event is None:
        return out
    values = event.times.tolist() if column is None else column.tolist()
    pairs = event.execs.reshape(-1, 2).tolist() + [[None, len(values)]]
    for (e, first), (_, stop) in zip(pairs, pairs[1:]):
        out[e] = values[first:stop]
    return out


def check_profile(profile: tinyprof.Profile, metrics, ranks, name) -> None:
    """``profile`` holds exactly ``ranks`` (as built by ``profiles()``)."""
    assert profile.name == name and profile.nranks == len(ranks)
    assert profile.metrics == list(metrics) and profile.created == CREATED
    by_rank: List[Dict[Tuple[str, ...], LocalEvent]] = [{e.path: e for e in ev} for _, ev in ranks]
    assert profile.callpaths == list(dict.fromkeys(p for d in by_rank for p in d))   # first seen
    parsed = {os.path.basename(p): _reader.parse_file(p) for p in profile.files}
    for path in profile.callpaths:
        first_given = [d[path] for d in by_rank if path in d]
        assert profile.loop(path) == first_given[0].loop
        for key, consistent in metrics:
            if consistent:
                given_values = [e.consistent[key] for e in first_given if key in e.consistent]
                got = profile.value(path, key)
                assert (got is None) if not given_values else bits(got) == bits(given_values[0])
        for r, (nexec, _) in enumerate(ranks):
            event = by_rank[r].get(path)
            assert profile.executions(r) == nexec
            times = expected_series(nexec, event)
            assert profile.series(path, r) == [[t / 1e9 for t in ex] for ex in times]
            assert raw_times(parsed, profile, path, r) == times         # exact int64
            for key, consistent in metrics:
                if consistent:
                    continue
                if event is not None and key in event.metrics:
                    want = expected_series(nexec, event, event.metrics[key])
                else:                              # never given: NaN per occurrence
                    want = [[math.nan] * len(ex) for ex in times]
                got = profile.series(path, r, key)
                assert [[bits(v) for v in ex] for ex in got] == [[bits(v) for v in ex] for ex in want]


def raw_times(parsed, profile, path, rank) -> List[List[int]]:
    """The int64 times of ``path`` on ``rank`` straight from the parsed file."""
    for f in parsed.values():
        h = f.header
        if h.first_rank <= rank < h.first_rank + h.rank_count:
            r = rank - h.first_rank
            ev = f.events.get(path)
            if ev is None:
                return [[] for _ in range(h.executions[r])]
            base = int(f.exec_base[r])
            o = ev.offsets[base:base + h.executions[r] + 1]
            return [ev.times[o[e]:o[e + 1]].tolist() for e in range(h.executions[r])]
    raise AssertionError(f"rank {rank} in no file")


@given(profiles())
@PROPERTY
def test_roundtrip_of_made_up_events(profile):
    metrics, ranks, splits, name = profile
    with tempfile.TemporaryDirectory() as d:
        write_profile(d, name, metrics, ranks, splits)
        assert len(os.listdir(d)) == len(splits) + 1
        check_profile(tinyprof.read(d), metrics, ranks, name)


# -- random programs through the hot path ------------------------------------

@st.composite
def programs(draw):
    """Per rank, per execution, a list of actions ``(callpath, ns, values)`` run
    under the root event; callpaths share one tree so ranks overlap."""
    tree = draw(trees())
    loops = {p: loop for p, loop in tree}
    pool = [p for p, _ in tree]
    action = st.tuples(st.sampled_from(pool), st.integers(0, 10**12),
                       st.fixed_dictionaries({}, optional={"c": VALUES, "m": VALUES}))
    ranks = draw(st.lists(st.lists(st.lists(action, max_size=4), max_size=3), min_size=1, max_size=4))
    return loops, ranks


def run_program(executions, loops, clock) -> None:
    """Run one rank's program: ``executions`` of actions, under the root ``main``."""
    for actions in executions:
        with tinyprof.Event("main"):
            for path, ns, values in actions:
                _enter(path, loops, ns, values, clock)


def _enter(path, loops, ns, values, clock) -> None:
    if len(path) == 1:
        with tinyprof.Event(path[0], loop=loops[path], **values):
            clock.tick(ns)
        return
    with tinyprof.Event(path[0], loop=loops[path[:1]]):
        _enter_inner(path, 2, loops, ns, values, clock)


def _enter_inner(path, depth, loops, ns, values, clock) -> None:
    last = depth == len(path)
    with tinyprof.Event(path[depth - 1], loop=loops[path[:depth]], **(values if last else {})):
        if last:
            clock.tick(ns)
        else:
            _enter_inner(path, depth + 1, loops, ns, values, clock)


def model(executions, loops) -> Dict[Tuple[str, ...], dict]:
    """What the event map must hold: per callpath (under "main") its loop mode,
    times and ``m`` values per execution, and the first ``c`` value."""
    out: Dict[Tuple[str, ...], dict] = {}

    def occur(path, e, ns, values, loop):
        rec = out.setdefault(path, {"loop": loop, "times": [[] for _ in executions],
                                    "m": [[] for _ in executions], "c": None})
        m = values.get("m", math.nan)
        if rec["loop"] == 2 and rec["times"][e]:
            rec["times"][e][0] += ns
            old = rec["m"][e][0]
            rec["m"][e][0] = m if old != old else (old + m if m == m else old)
        else:
            rec["times"][e].append(ns)
            rec["m"][e].append(m)
        if "c" in values and rec["c"] is None:
            rec["c"] = (values["c"],)

    for e, actions in enumerate(executions):
        occur(("main",), e, sum(ns for _, ns, _ in actions), {}, 0)
        for path, ns, values in actions:
            for k in range(1, len(path) + 1):
                occur(("main",) + path[:k], e, ns, values if k == len(path) else {},
                      loops[path[:k]])
    return out


@given(programs())
@PROPERTY
def test_roundtrip_of_random_programs(clock, program):
    # the clock is shared by the examples: only differences of it are recorded
    loops, ranks = program
    metrics = [("c", True), ("m", False)]
    prof = tinyprof.Profiler("prog", selfkeys="c:0,m:1")
    recorded = []
    for executions in ranks:
        impl.reset()
        run_program(executions, loops, clock)
        recorded.append((impl.executions(), _collect.collect(impl.root())))
    with tempfile.TemporaryDirectory() as d:
        write_profile(d, prof.name, metrics, recorded, [])
        p = tinyprof.read(d)
        check_profile(p, metrics, recorded, "prog")
    for r, executions in enumerate(ranks):
        assert p.executions(r) == len(executions)
        for path, rec in model(executions, loops).items():
            assert p.loop(path) == rec["loop"]
            assert p.series(path, r) == [[t / 1e9 for t in ex] for ex in rec["times"]]
            got = p.series(path, r, "m")
            assert [[bits(v) for v in ex] for ex in got] == [[bits(v) for v in ex] for ex in rec["m"]]


# -- build_file details ------------------------------------------------------

def _event(path, times, consistent=None, loop=0):
    return LocalEvent(tuple(path), loop, True, np.array(times, dtype=np.int64),
                      np.array([0, 0] if times else [], dtype=np.int64), consistent or {}, {})


def test_consistent_value_of_the_lowest_rank_wins(tmp_path):
    ranks = [(1, [_event(["a"], [1])]),
             (1, [_event(["a"], [2], {"tag": 5.0})]),
             (1, [_event(["a"], [3], {"tag": 6.0})])]
    write_profile(str(tmp_path), "p", [("tag", True)], ranks, [2])
    p = tinyprof.read(tmp_path)
    assert p.value(("a",), "tag") == 5.0


def test_non_common_event_costs_an_empty_field(tmp_path):
    ranks = [(1, [_event(["main"], [10])]),
             (1, [_event(["main"], [11]), _event(["main", "update"], [4])])]
    write_profile(str(tmp_path), "p", [], ranks, [])
    text = (tmp_path / file_name("p", 0, 1)).read_text()
    assert "0|0||10|11\n0:1|0|||4\n" in text
    p = tinyprof.read(tmp_path)
    assert p.series(("main", "update"), 0) == [[]]
    assert p.series(("main", "update"), 1) == [[4e-9]]


def test_file_names_are_zero_padded_and_safe():
    assert file_name("heat", 3, 12) == "heat.03-of-12.tp"
    assert file_name("a/b c", 0, 1) == "a_b_c.0-of-1.tp"
    assert file_name("", 0, 1) == "profile.0-of-1.tp"


def test_executions_are_run_length_encoded(tmp_path):
    ranks = [(2, []), (2, []), (2, []), (0, []), (1, []), (1, [])]
    write_profile(str(tmp_path), "p", [], ranks, [])
    assert "\nexecutions 2*3,0,1*2\n" in (tmp_path / file_name("p", 0, 1)).read_text()
    assert [tinyprof.read(tmp_path).executions(r) for r in range(6)] == [2, 2, 2, 0, 1, 1]


# -- version 2: encode_file, sections, depth --------------------------------------

def _encode(names, parents, ids, fields, sections=(), **header) -> bytes:
    """A one-rank file of the given lines (loop 0, no metrics)."""
    h = Header(name="p", nranks=1, first_rank=0, rank_count=1, executions=[1],
               created=CREATED, **header)
    return encoding.encode_file(h, names, parents, ids, [0] * len(ids), [b""] * len(ids),
                               [fields], sections)


def _parse(tmp_path, data: bytes) -> _reader.ParsedFile:
    path = str(tmp_path / "p.0-of-1.tp")
    output_dir.write_atomic(path, data)
    return _reader.parse_file(path)


def test_encode_file_writes_run_set_and_checksum(tmp_path):
    data = _encode(["main", "x"], [-1, 0], [0, 1], [b"5", b"2"],
                   run="00ff00ff00ff00ff", set_kind="snapshot", set_number=12)
    head, _, rest = data.partition(b"\nnranks ")
    assert head == b"tinyprof 3\nname p\nrun 00ff00ff00ff00ff\nset snapshot 12"
    body, end = data[:data.rindex(b"end ")], data[data.rindex(b"end "):]
    assert body.endswith(b"\nevents 2\n0|0||5\n0:1|0||2\n")
    assert end == b"end %08x\n" % zlib.crc32(body)
    h = _parse(tmp_path, data).header
    assert (h.run, h.set_kind, h.set_number, h.format_version) == ("00ff00ff00ff00ff", "snapshot", 12, 3)


def test_run_id_comes_from_the_environment_when_valid(monkeypatch):
    monkeypatch.delenv("TINYPROF_RUN_ID", raising=False)
    assert Header(name="p", nranks=1, first_rank=0, rank_count=1).run == "0" * 16
    for bad in ("xyz", "0123456789ABCDEF", "0123456789abcdef0"):
        monkeypatch.setenv("TINYPROF_RUN_ID", bad)
        assert Header(name="p", nranks=1, first_rank=0, rank_count=1).run == "0" * 16
    monkeypatch.setenv("TINYPROF_RUN_ID", "0123456789abcdef")
    assert Header(name="p", nranks=1, first_rank=0, rank_count=1).run == "0123456789abcdef"


def test_sections_known_are_kept_unknown_skipped(tmp_path):
    payload = b"\x00\xff binary\nend 00000000\nsection mpi 3\n|||\n"     # lines, but not to the reader
    sections = [("zz-later.v3", b"\n" * 5 + payload), ("mpi", payload), ("trace", b""),
                ("a" * 64, b"x")]
    data = _encode(["main"], [-1], [0], [b"7"], sections)
    parsed = _parse(tmp_path, data)
    assert parsed.sections == {"mpi": payload, "trace": b""}
    assert parsed.lines[0].times.tolist() == [7]
    assert tinyprof.read(tmp_path).series(("main",), 0) == [[7e-9]]


def test_deep_nesting_is_linear(tmp_path):
    """Issue 11, item 7: 20,000 nested levels, each line O(1) bytes for its path."""
    depth = 20_000
    parents = list(range(-1, depth - 1))
    ids = [i % 3 for i in range(depth)]
    fields = [str(depth - i).encode() for i in range(depth)]
    data = _encode(["a", "b", "c"], parents, ids, fields)
    assert len(data) < 40 * depth
    parsed = _parse(tmp_path, data)
    assert (parsed.names, parsed.parents, parsed.ids) == (["a", "b", "c"], parents, ids)
    assert [int(line.times[0]) for line in parsed.lines] == list(range(depth, 0, -1))


def test_name_table_gives_parents_and_last_names():
    order = [("m",), ("m", "a"), ("m", "a", "m"), ("m", "b"), ("x",), ("x", "a")]
    assert assemble.name_table(order) == (["m", "a", "b", "x"], [-1, 0, 1, 0, -1, 4],
                                        [0, 1, 0, 2, 3, 1])
