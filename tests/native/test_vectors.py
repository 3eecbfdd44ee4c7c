"""Shared test vectors: the same event sequence with the same injected
timings gives byte-identical profiles from the Python and the C++ writers,
single-process and under MPI; and the C++ writer gives the golden file."""
from __future__ import annotations

import math
import random
import re
import struct
import sys
import zlib
from pathlib import Path
from typing import Callable, List

import pytest
from conftest import EPOCH, ROOT, run
from test_golden import released

import tinyprof
from tinyprof.format.encoding import escape, format_value

# Both writers take the run id and the creation time from the environment,
# so that their files can be byte-identical; the automatic metadata (command
# line, writer, ...) is off, the user's keys stay.
RUN_ID = "0123456789abcdef"
SAME = dict(TINYPROF_RUN_ID=RUN_ID, SOURCE_DATE_EPOCH=EPOCH, TINYPROF_AUTO_METADATA="0")

SCENARIO_CPP = "tests/native/scenario.cpp"
SCENARIO_PY = Path(__file__).with_name("scenario.py")


class RankScript:
    """The script of one rank (language: tests/native/scenario.cpp)."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.lines: List[str] = []

    def add(self, *fields) -> None:
        self.lines.append("\t".join(map(str, fields)))

    def profiler(self, name: str, frequency: float = 0, selfkeys: str = "") -> None:
        self.add("profiler", escape(name), frequency, selfkeys)

    def enter(self, name: str, common: bool = True, loop: int = 0, values: str = "") -> None:
        self.add("enter", escape(name), int(common), loop, values)

    def exit(self) -> None:
        self.add("exit")

    def event(self, name: str, ticks: int, common: bool = True, loop: int = 0, values: str = ""):
        self.enter(name, common, loop, values)
        self.tick(ticks)
        self.exit()

    def tick(self, ns: int) -> None:
        self.add("tick", ns)

    def meta(self, key: str, value) -> None:
        kind = "s" if isinstance(value, str) else "i" if isinstance(value, int) else "f"
        self.add("meta", key, kind, escape(value) if kind == "s" else repr(value))


Body = Callable[[RankScript], None]


def write_scripts(prefix: Path, nranks: int, body: Body) -> None:
    for rank in range(nranks):
        script = RankScript(rank)
        body(script)
        Path(f"{prefix}.{rank}.txt").write_text("\n".join(script.lines) + "\n", encoding="utf-8")


def both(build, tmp_path: Path, body: Body, nranks: int = 0, **extra: str):
    """Run ``body`` with the C++ and the Python driver, both with the
    environment ``extra`` too; return both output dirs (``nranks`` 0: single
    process, no MPI)."""
    prefix = tmp_path / "script"
    write_scripts(prefix, max(nranks, 1), body)
    tail = [] if nranks else ["--no-mpi"]
    cxx, py = tmp_path / "cxx", tmp_path / "py"
    run([build(SCENARIO_CPP), prefix, cxx, *tail], nranks, **SAME, **extra)
    run([sys.executable, SCENARIO_PY, prefix, py, *tail], nranks, **SAME, **extra)
    return cxx, py


def run_cxx(build, tmp_path: Path, body: Body, nranks: int = 0, run_id: str = RUN_ID) -> Path:
    """Run ``body`` with the C++ driver alone; return its output directory."""
    prefix, out = tmp_path / "script", tmp_path / "out"
    write_scripts(prefix, max(nranks, 1), body)
    run([build(SCENARIO_CPP), prefix, out, *([] if nranks else ["--no-mpi"])], nranks,
        **dict(SAME, TINYPROF_RUN_ID=run_id))
    return out


def assert_identical(cxx: Path, py: Path) -> None:
    """The same files (snapshot directories included), byte for byte."""
    def files(top: Path) -> list:
        return sorted(str(p.relative_to(top)) for p in top.rglob("*") if p.is_file())
    names = files(py)
    assert names and files(cxx) == names
    for name in names:
        assert (cxx / name).read_bytes() == (py / name).read_bytes(), name


# -- scenarios ----------------------------------------------------------------

def fig2(s: RankScript) -> None:
    """tests/format/test_golden.py's Fig. 2 program (rank 1 runs update)."""
    s.profiler("fig2", 3600, "tag:0,mem:1")       # the paper's 5 s: a periodic snapshot could come
    s.add("aggregators", 1)
    r = s.rank
    for x in range(2):
        s.enter("main", values=f"mem:{1024 * (r + 1) + x}")
        s.tick(5)
        for i in range(3):
            s.event("compute", 1000 * (i + 1) + 100 * r + 10 * x, loop=1)
        s.enter("exchange")
        s.tick(50)
        for j in range(2):
            s.event("comm", 200 * (j + 1) + 10 * x + r, loop=2,
                    values=f"tag:2,mem:{1.25 * (j + 1) * (r + 1) + x!r}")
        s.exit()
        if r == 1:
            s.event("update", 300 + x, common=False)
        s.exit()
    s.add("flush")


def awkward(s: RankScript) -> None:
    """Escaped names and keys, every number form, loop modes, missing values,
    recursion, gaps between executions, other root events, a second flush."""
    s.profiler("awk ward", 0, "tag:0, my key:1,m%x:1,c2:0")
    r = s.rank
    values = ["1e-7", "2.5e16", "-0.0", "0.1", "0.3333333333333333", "1e300", "-1.5",
              "123456.789", "inf", "-inf", "nan", "4096", "1e16", "0.0001", "1.0e-5"]
    for x in range(3):
        if x:
            s.event("setup", 7, values="tag:1")   # a root event that is not the first root
        s.enter("main")                           # the first root: starts each execution
        s.tick(3 + r)
        for i, v in enumerate(values):
            s.event("a|b<c%d", 10 + i, loop=1, values=f"my key:{v},c2:{values[-1 - i]}")
        if x != 1:
            s.event("only 0 and 2", 4, values="m%x:2.5")
        for k in range(3):
            s.event("summed", 5 * k + x, loop=2,
                    values="my key:1.5" if k != 1 else "m%x:0.25,tag:7")
        s.enter("f")
        s.enter("f")
        s.event("f", 1 + r, values=f"tag:{x}")
        s.exit()
        s.exit()
        s.event("é 漢字 \r\n%0A", 2 * x + 1, common=(r % 2 == 0))
        s.exit()
        s.event("other root", 9)                 # not the first root: no new execution
        if x == 0:
            s.add("flush")
    s.add("flush")


def uneven(s: RankScript) -> None:
    """MPI hints gone wrong: rank-only events hinted common, common events in
    another order, clashing loop modes, a rank with no events, consistent
    values given by higher ranks only."""
    r = s.rank
    s.profiler("uneven", 0, "tag:0,mem:1")
    if r == 2:
        s.add("flush")
        return
    for x in range(2 + r % 2):
        s.enter("main")
        s.tick(1)
        order = ["b", "a"] if r == 1 else ["a", "b"]
        for name in order:
            s.event(name, 10 * r + x, loop=2 if r == 0 else 1,
                    values=f"tag:{r}" if r >= 1 and name == "a" else f"mem:{r + 0.5}")
        if r % 3 == 0:
            s.event(f"rank{r}", 3, common=True)   # a wrong hint
        if r >= 1:
            s.event("late", 2, common=False, values=f"tag:{r * 10}")
        s.exit()
    s.add("flush")


def common_only(s: RankScript) -> None:
    """Hints right: common events on every rank, plus correctly hinted rank-only ones."""
    r = s.rank
    s.profiler("common", 0, "mem:1")
    for x in range(2):
        s.enter("main")
        for i in range(3):
            s.event("step", 100 + r + i, loop=1, values=f"mem:{r * i}")
        s.event("halo", 7 * (r + 1), loop=2)
        if r % 2:
            s.enter("odd", common=False)
            s.event("inner", 5)
            s.exit()
        s.exit()
    s.add("flush")


def requests(s: RankScript) -> None:
    """A request loop: each execution adds a callpath, which the earlier
    executions lack (format version 3's execution gaps '*k;'), and a
    handler that every third request runs; a snapshot and a flush mid-way."""
    s.profiler("requests", 3600)
    r = s.rank
    for x in range(12):
        s.enter("request")
        s.tick(1 + r)
        s.event(f"handler{x % (5 + r)}", 10 + x)
        if x % 3 == 2:
            s.event("every third", 3, loop=1)
        s.exit()
        if x == 5:
            s.add("snapshot")
        if x == 8:
            s.add("flush")
    s.add("flush")


SCENARIOS = {"fig2": fig2, "awkward": awkward, "uneven": uneven, "common_only": common_only,
             "requests": requests}


def chained(s: RankScript) -> None:
    """Snapshots after every execution and one inside an open execution
    (a loop-2 sum and a metric then change): with TINYPROF_CHAIN=2, full
    ones at 1 and 4, then 4 deltas (chains double: 2, 4, ...); callpaths
    new in a delta, a rank with less."""
    r = s.rank
    s.profiler("chained", 3600, "tag:0,it:1")
    for x in range(7):
        s.enter("main")
        s.tick(1 + r)
        for i in range(x + r % 2):
            s.event("step", 10 * i + x, loop=1, values=f"it:{i}")
        s.event("sum", 3 + x, loop=2, values="it:0.5")
        if x == 2:
            s.add("snapshot")
        s.event("sum", 4, loop=2, values="it:0.25")
        if x >= 3 and r != 1:
            s.event(f"late{r}", 2, common=False, values=f"tag:{x}")
        s.exit()
        s.add("snapshot")
    s.add("flush")


def with_snapshot(body: Body, aggregators: int = 0) -> Body:
    """``body`` with an explicit snapshot before its last flush (snapshots on,
    an hour apart: no periodic one comes), on every rank, optionally over
    ``aggregators`` files."""
    def snapshotted(s: RankScript) -> None:
        body(s)
        head = s.lines[0].split("\t")
        s.lines[0] = "\t".join([head[0], head[1], "3600", head[3]])
        if aggregators:
            s.lines.insert(1, f"aggregators\t{aggregators}")
        last = max(i for i, line in enumerate(s.lines) if line == "flush")
        s.lines.insert(last, "snapshot")
    return snapshotted


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
