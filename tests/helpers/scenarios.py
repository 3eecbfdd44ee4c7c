"""The scenarios of the shared test vectors (tests/native/test_vectors.py): one
script per rank, in the language of tests/native/scenario.cpp, replayed by the
C++ driver and by its Python twin tests/native/scenario.py."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, List

from helpers.native import EPOCH, run
from helpers.tools import TESTS
from tinyprof.format.encoding import escape

# Both writers take the run id and the creation time from the environment,
# so that their files can be byte-identical; the automatic metadata (command
# line, writer, ...) is off, the user's keys stay.
RUN_ID = "0123456789abcdef"
SAME = dict(TINYPROF_RUN_ID=RUN_ID, SOURCE_DATE_EPOCH=EPOCH, TINYPROF_AUTO_METADATA="0")

SCENARIO_CPP = "tests/native/scenario.cpp"
SCENARIO_PY = TESTS / "native" / "scenario.py"


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
