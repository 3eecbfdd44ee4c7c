"""Shared test vectors: the same event sequence with the same injected
timings gives byte-identical profiles from the Python and the C++ writers,
single-process and under MPI; and the C++ writer gives the golden file."""
from __future__ import annotations

import math
import random
import re
import struct
import zlib
from pathlib import Path

import pytest
from helpers.golden import released
from helpers.native import ROOT, run
from helpers.scenarios import (
    RUN_ID,
    SCENARIOS,
    Body,
    RankScript,
    assert_identical,
    awkward,
    both,
    chained,
    common_only,
    fig2,
    run_cxx,
    uneven,
    with_snapshot,
)

import tinyprof
from tinyprof.format.encoding import format_value

# -- tests ----------------------------------------------------------------------

def test_header_version_is_the_package_version():
    header = (ROOT / "native/include/tinyprof/tinyprof.hpp").read_text()
    assert re.search(r'#define TINYPROF_VERSION "([^"]+)"', header)[1] == tinyprof.__version__


def test_metric_values_are_formatted_as_python_does(build, tmp_path):
    rng = random.Random(6)
    values = [0.0, -0.0, 1.0, -7.0, 0.25, 1e16, 1e16 - 2, 9999999999999998.0, 1e15 + 0.5,
              1e-4, 1e-5, 0.0001234, 123456789012345.6, 2.5e16, 1e300, 5e-324,
              -1.7976931348623157e308, 2.2250738585072014e-308, math.pi, 1 / 3, 0.1 + 0.2]
    values += [rng.uniform(-1e6, 1e6) for _ in range(3000)]
    values += [struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0] for _ in range(5000)]
    values += [rng.randint(-10**17, 10**17) * 10.0 ** rng.randint(-30, 5) for _ in range(3000)]
    values = [v for v in values if v == v and not math.isinf(v)]
    src = tmp_path / "values.txt"
    src.write_text("".join(f"{struct.unpack('<Q', struct.pack('<d', v))[0]:016x}\n" for v in values))
    out = run([build("tests/native/values.cpp"), src]).stdout.split("\n")[:-1]
    assert len(out) == len(values)
    bad = [(v, c) for v, c in zip(values, out) if c != format_value(v)]
    assert not bad, bad[:10]


@pytest.mark.parametrize("name", ["awkward", "fig2", "common_only", "requests"])
def test_single_process_vectors_are_byte_identical(build, tmp_path, name):
    cxx, py = both(build, tmp_path, SCENARIOS[name])
    assert_identical(cxx, py)


@pytest.mark.parametrize("nranks,name", [(1, "awkward"), (3, "uneven"), (4, "uneven"),
                                         (3, "common_only"), (4, "awkward"), (2, "requests")])
def test_mpi_vectors_are_byte_identical(build, tmp_path, nranks, name):
    cxx, py = both(build, tmp_path, SCENARIOS[name], nranks)
    assert_identical(cxx, py)


@pytest.mark.parametrize("aggregators", [1, 2, 3])
def test_mpi_vectors_split_over_aggregators(build, tmp_path, aggregators):
    def body(s: RankScript) -> None:
        common_only(s)
        s.lines.insert(1, f"aggregators\t{aggregators}")
        s.add("flush")
    cxx, py = both(build, tmp_path, body, 3)
    assert len(list(cxx.iterdir())) == aggregators
    assert_identical(cxx, py)


@pytest.mark.parametrize("nranks,name,aggregators", [(0, "awkward", 0), (1, "fig2", 0), (3, "uneven", 0),
                                                     (3, "common_only", 2), (5, "awkward", 2)])
def test_snapshot_vectors_are_byte_identical(build, tmp_path, nranks, name, aggregators):
    """The first snapshot is a whole file: C++ and Python write it alike,
    per rank without MPI, else aggregated (A files, A not dividing P)."""
    cxx, py = both(build, tmp_path, with_snapshot(SCENARIOS[name], aggregators), nranks)
    files = max(1, min(aggregators, nranks))
    assert len(list((py / "snapshots" / "000001").iterdir())) == files
    assert_identical(cxx, py)


@pytest.mark.parametrize("nranks,aggregators", [(0, 0), (1, 0), (3, 2), (4, 3)])
@pytest.mark.parametrize("keep", ["last", "all"])
def test_snapshot_chains_are_byte_identical(build, tmp_path, nranks, aggregators, keep):
    """Chains of delta snapshots, per rank and aggregated: the same files
    (the same ones pruned with keep "last"), byte for byte; each reads back
    as what its rank had recorded, as the flush does."""
    def body(s: RankScript) -> None:
        chained(s)
        s.lines.insert(1, f"keep\t{keep}")
        if aggregators:
            s.lines.insert(1, f"aggregators\t{aggregators}")
    cxx, py = both(build, tmp_path, body, nranks, TINYPROF_CHAIN="2")
    assert_identical(cxx, py)
    done = tinyprof.snapshots(str(cxx))
    assert done == ([4, 5, 6, 7, 8] if keep == "last" else list(range(1, 9)))   # last: 8 and its chain
    heads = {k: (cxx / "snapshots" / f"{k:06d}" / _first(cxx, k)).read_bytes().split(b"\n")[3] for k in done}
    sets = {k: b"set snapshot %d" % k if k in (1, 4) else b"set snapshot %d over %d" % (k, k - 1)
            for k in range(1, 9)}
    assert heads == {k: sets[k] for k in done}
    last, flushed = tinyprof.read(str(cxx), snapshot=8), tinyprof.read(str(cxx / _flushed(cxx)))
    for r in range(max(nranks, 1)):
        for path in flushed.callpaths:
            assert last.series(path, r) == flushed.series(path, r), (r, path)


def _first(out: Path, k: int) -> str:
    return sorted(p.name for p in (out / "snapshots" / f"{k:06d}").iterdir())[0]


def _flushed(out: Path) -> str:
    return sorted(p.name for p in out.iterdir() if p.is_file())[0]


# The user's run metadata (docs/format.md, "The meta section"): every type,
# hostile strings, a key of the environment's overridden by the program's.
META = {"size": 64, "neg": -2**63, "eps": 1.5e-7, "big": 2.5e16, "inf": float("inf"),
        "case": "a|b\n%0A\r é 漢字", "empty": "", "queue": "from the program"}
META_ENV = "queue=debug,note=a%2Cb=c%25,bad item,k=caf%C3%A9,u=%FF%FE"


def described(body: Body) -> Body:
    def with_meta(s: RankScript) -> None:
        body(s)
        at = 1                          # after the profiler line
        for key, value in META.items():
            s.meta(key, value)
            s.lines.insert(at, s.lines.pop())
            at += 1
    return with_meta


@pytest.mark.parametrize("nranks,name,aggregators", [(0, "fig2", 0), (3, "common_only", 2),
                                                     (2, "requests", 0)])
def test_metadata_vectors_are_byte_identical(build, tmp_path, nranks, name, aggregators):
    """Flushes and snapshots (the first one whole) with the user's metadata
    and TINYPROF_METADATA's: the same bytes, in file 0 only, read back."""
    cxx, py = both(build, tmp_path, described(with_snapshot(SCENARIOS[name], aggregators)), nranks,
                   TINYPROF_METADATA=META_ENV)
    assert_identical(cxx, py)
    for p in (tinyprof.read(str(cxx)), tinyprof.read(str(cxx), snapshot=1)):
        assert p.metadata == dict(META, note="a,b=c%", k="café", u="\udcff\udcfe")
        assert [b"\nsection meta " in open(f, "rb").read() for f in p.files] == \
            [True] + [False] * (len(p.files) - 1)


def test_cxx_writes_the_golden_file(build, tmp_path):
    golden = (ROOT / "tests/golden/fig3-v3.tp").read_bytes()
    run_id = re.search(rb"^run ([0-9a-f]{16})$", golden, re.M)
    out = run_cxx(build, tmp_path, fig2, 2, run_id[1].decode() if run_id else RUN_ID)
    assert released((out / "fig2.0-of-1.tp").read_bytes()) == released(golden)


def test_cxx_file_ends_in_its_crc32(build, tmp_path):
    data = (run_cxx(build, tmp_path, awkward, 2) / "awk_ward.0-of-1.tp").read_bytes()
    body, end = data.rsplit(b"end ", 1)
    assert end == b"%08x\n" % zlib.crc32(body)
    head = body.split(b"\n")[:4]
    assert head == [b"tinyprof 3", b"name awk ward", b"run " + RUN_ID.encode(), b"set flush 1"]


def test_run_id_is_drawn_once_and_shared_by_the_ranks(build, tmp_path):
    def runs(out: Path) -> set:
        return {re.search(rb"^run ([0-9a-f]{16})$", p.read_bytes(), re.M)[1] for p in out.iterdir()}
    def body(s: RankScript) -> None:
        common_only(s)
        s.lines.insert(1, "aggregators\t3")
    for d in "ab":
        (tmp_path / d).mkdir()
    first, second = (run_cxx(build, tmp_path / d, body, 3, run_id="") for d in "ab")
    assert len(runs(first)) == 1 and runs(first) != runs(second)


def test_cxx_profile_reads_back_exactly(build, tmp_path):
    prof = tinyprof.read(str(run_cxx(build, tmp_path, uneven, 3)))
    assert prof.nranks == 3 and prof.metrics == [("tag", True), ("mem", False)]
    assert [prof.executions(r) for r in range(3)] == [2, 3, 0]
    ns = lambda xs: [[t / 1e9 for t in ex] for ex in xs]
    assert prof.series(("main", "a"), 0) == ns([[0], [1]])
    assert prof.series(("main", "a"), 1) == ns([[10], [11], [12]])
    assert prof.series(("main", "b"), 2) == []
    assert prof.series(("main", "a"), 0, "mem") == [[0.5], [0.5]]
    assert prof.loop(("main", "a")) == 1         # rank 0's 2 gives way to rank 1's 1
    assert prof.value(("main", "a"), "tag") == 1.0
    assert prof.value(("main", "late"), "tag") == 10.0
    assert prof.series(("main", "rank0"), 0) == ns([[3], [3]])
    assert prof.series(("main", "rank0"), 1) == [[], [], []]
    assert set(prof.callpaths) == {("main",), ("main", "a"), ("main", "b"), ("main", "rank0"),
                                   ("main", "late")}
