"""Golden files: the paper's Fig. 2 program on 2 ranks, run twice, must give
the bytes of tests/golden/fig3-v3.tp (our form of the paper's Fig. 3(b)).

tests/golden/fig3.tp holds the same data in format version 1: it was written
by hand from the program below and the version-1 grammar, and the reader
still reads it. fig3-v2.tp was written by the version-2 writer (with
SOURCE_DATE_EPOCH and TINYPROF_RUN_ID fixed) and checked against it; the
reader still reads it too. fig3-v3.tp is what the version-3 writer makes of
the same run: the program has no execution gap, so it differs from
fig3-v2.tp in its first line and its checksum only.
Times are sums of the clock ticks inside each event, e.g. rank 0's first
``main`` is 5 + (1000+2000+3000) + (50 + 200+400) = 6655 ns.
"""
from __future__ import annotations

import os
import re
import zlib

import numpy as np
import pytest

import tinyprof
from tinyprof import annotate
from tinyprof.format.encoding import Header
from tinyprof.format.reader import parse_file
from tinyprof.runtime import assemble
from tinyprof.runtime import collect as _collect

impl = annotate.impl
Event = tinyprof.Event
GOLDEN = os.path.join(os.path.dirname(__file__), os.pardir, "golden", "fig3-v3.tp")
GOLDEN_V2 = os.path.join(os.path.dirname(__file__), os.pardir, "golden", "fig3-v2.tp")
GOLDEN_V1 = os.path.join(os.path.dirname(__file__), os.pardir, "golden", "fig3.tp")
RUN = "5f0c9e1d2a3b4c6d"


def fig2(rank: int, execution: int, clock) -> None:
    """Fig. 2: main; a 3-iteration loop (mode 1); comm summed (mode 2) with a
    consistent tag and an inconsistent mem; update on rank 1 only."""
    x = execution
    with Event("main", mem=1024 * (rank + 1) + x):
        clock.tick(5)
        for i in range(3):
            with Event("compute", loop=1):
                clock.tick(1000 * (i + 1) + 100 * rank + 10 * x)
        with Event("exchange"):
            clock.tick(50)
            for j in range(2):
                with Event("comm", loop=2, tag=2, mem=1.25 * (j + 1) * (rank + 1) + x):
                    clock.tick(200 * (j + 1) + 10 * x + rank)
        if rank == 1:
            with Event("update", is_common=False):
                clock.tick(300 + x)


def released(data: bytes) -> bytes:
    """``data`` without what a release changes: its ``version`` line, and the
    checksum over it (checked here instead), so that bumping tinyprof/_version.py
    alone leaves every golden file true."""
    body, end = data.rsplit(b"end ", 1)
    assert end == b"%08x\n" % zlib.crc32(body), "the end line is not the file's checksum"
    return re.sub(rb"^version [^\n]*\n", b"", body, count=1, flags=re.M)


def build(clock, version: str = tinyprof.__version__) -> bytes:
    prof = tinyprof.Profiler("fig2", 5, "tag:0,mem:1")
    ranks, executions = [], []
    for rank in range(2):
        impl.reset()
        for x in range(2):
            fig2(rank, x, clock)
        ranks.append(_collect.collect(impl.root()))
        executions.append(impl.executions())
    header = Header(name=prof.name, nranks=2, first_rank=0, rank_count=2,
                    metrics=prof.metrics, version=version)
    return assemble.build_file(header, ranks, executions)


def test_fig2_gives_the_golden_file(clock, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    monkeypatch.setenv("TINYPROF_RUN_ID", RUN)
    with open(GOLDEN, "rb") as f:
        assert released(build(clock)) == released(f.read())


def test_a_release_bump_leaves_the_golden_file_true(clock, monkeypatch):
    """Only tinyprof/_version.py changes at a release: the golden comparison holds
    for another version, and still tells the files apart by anything else."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    monkeypatch.setenv("TINYPROF_RUN_ID", RUN)
    with open(GOLDEN, "rb") as f:
        golden = f.read()
    bumped = build(clock, version="99.1.0rc2")
    assert b"\nversion 99.1.0rc2\n" in bumped and bumped != golden
    assert released(bumped) == released(golden)
    renamed = bumped.rsplit(b"end ", 1)[0].replace(b"name fig2", b"name fig3")
    assert released(renamed + b"end %08x\n" % zlib.crc32(renamed)) != released(golden)
    with pytest.raises(AssertionError, match="checksum"):
        released(bumped.replace(b"name fig2", b"name fig3"))


@pytest.mark.parametrize("golden,version", [(GOLDEN, 3), (GOLDEN_V2, 2)])
def test_every_golden_file_holds_the_same_lines(golden, version):
    v1, v2 = parse_file(GOLDEN_V1), parse_file(golden)
    assert (v1.header.format_version, v2.header.format_version) == (1, version)
    assert (v1.header.run, v1.header.set_kind) == ("", "")
    assert (v2.header.run, v2.header.set_kind, v2.header.set_number) == (RUN, "flush", 0)
    assert (v1.names, v1.parents, v1.ids) == (v2.names, v2.parents, v2.ids)
    assert v2.parents == [-1, 0, 0, 2, 0]
    assert list(v1.events) == list(v2.events)
    for a, b in zip(v1.lines, v2.lines):
        assert (a.loop, a.consistent, a.times.tolist(), a.offsets.tolist()) == (
            b.loop, b.consistent, b.times.tolist(), b.offsets.tolist())
        assert list(a.metrics) == list(b.metrics) == ["mem"]
        np.testing.assert_array_equal(a.metrics["mem"], b.metrics["mem"])   # NaN equals NaN


@pytest.mark.parametrize("golden,run,kind", [(GOLDEN, RUN, ("flush", 0)), (GOLDEN_V2, RUN, ("flush", 0)),
                                             (GOLDEN_V1, "", None)])
def test_golden_file_reads_back(golden, run, kind):
    p = tinyprof.read(golden)
    assert (p.name, p.nranks, p.metrics, p.created) == (
        "fig2", 2, [("tag", True), ("mem", False)], "2023-11-14T22:13:20Z")
    assert (p.run, p.set) == (run, kind)
    assert p.callpaths == [("main",), ("main", "compute"), ("main", "exchange"),
                           ("main", "exchange", "comm"), ("main", "update")]
    assert [p.loop(c) for c in p.callpaths] == [0, 1, 0, 2, 0]
    assert [p.executions(r) for r in range(2)] == [2, 2]
    ns = lambda path, rank: [[round(t * 1e9) for t in ex] for ex in p.series(path, rank)]
    assert ns(("main",), 0) == [[6655], [6705]]
    assert ns(("main",), 1) == [[7257], [7308]]
    assert ns(("main", "compute"), 0) == [[1000, 2000, 3000], [1010, 2010, 3010]]
    assert ns(("main", "compute"), 1) == [[1100, 2100, 3100], [1110, 2110, 3110]]
    assert ns(("main", "exchange"), 1) == [[652], [672]]
    assert ns(("main", "exchange", "comm"), 0) == [[600], [620]]
    assert ns(("main", "update"), 0) == [[], []]
    assert ns(("main", "update"), 1) == [[300], [301]]
    assert p.value(("main", "exchange", "comm"), "tag") == 2
    assert p.value(("main",), "tag") is None
    assert p.series(("main",), 1, "mem") == [[2048.0], [2049.0]]
    assert p.series(("main", "exchange", "comm"), 0, "mem") == [[3.75], [5.75]]
    assert p.series(("main", "exchange", "comm"), 1, "mem") == [[7.5], [9.5]]
