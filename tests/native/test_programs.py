"""C++ programs under mpiexec at several rank counts, their profiles read back
with the Python reader: the example application, threads, snapshots, exit
behaviour, tinyprof-convert, and the CMake routes."""
from __future__ import annotations

import csv
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
from conftest import BIN, FLAGS, IMPLEMENTATION, MPICXX, ROOT, env, run
from test_vectors import RankScript, run_cxx

import tinyprof
from tinyprof.format import output_dir
from tinyprof.format.encoding import escape


@pytest.mark.parametrize("nranks", [1, 3, 4])
def test_example_application(build, tmp_path, nranks):
    out = tmp_path / "out"
    run([build("native/examples/heat.cpp"), 5, out], nranks)    # flushed at MPI_Finalize
    prof = tinyprof.read(str(out))
    assert prof.name == "heat" and prof.nranks == nranks
    assert prof.callpaths == [("main",), ("main", "compute"), ("main", "exchange"),
                              ("main", "exchange", "comm"), ("main", "report")]
    assert prof.loop(("main", "compute")) == 1 and prof.loop(("main", "exchange", "comm")) == 2
    assert prof.value(("main", "exchange", "comm"), "tag") == 2.0
    for rank in range(nranks):
        assert prof.executions(rank) == 2
        compute = prof.series(("main", "compute"), rank)
        assert [len(ex) for ex in compute] == [5, 5] and min(min(compute)) > 0
        assert prof.series(("main", "exchange", "comm"), rank, "mem") == [[80.0], [80.0]]
        assert [len(ex) for ex in prof.series(("main", "report"), rank)] == ([1, 1] if rank == 0 else [0, 0])
        main, exchange = prof.series(("main",), rank), prof.series(("main", "exchange"), rank)
        assert all(m[0] > sum(c) + sum(e) for m, c, e in zip(main, compute, exchange))


def test_aggregators_from_the_environment(build, tmp_path):
    out = tmp_path / "out"
    run([build("native/examples/heat.cpp"), 2, out], 3, TINYPROF_AGGREGATORS="2")
    assert sorted(p.name for p in out.iterdir()) == ["heat.0-of-2.tp", "heat.1-of-2.tp"]
    prof = tinyprof.read(str(out))
    assert prof.nranks == 3 and [prof.executions(r) for r in range(3)] == [2, 2, 2]


def test_boolean_variables_read_as_in_python(build, tmp_path):
    """Issue 47: the C++ side reads TINYPROF_* booleans by Python's rule
    (tests/test_env.py): "Off" is off, " yes " on, and a value that is
    neither warns once and is the default (capture on when the library is
    loaded, in C++)."""
    out = tmp_path / "out"
    done = run([build("native/examples/heat.cpp"), 2, out], 2, TINYPROF_AUTO_METADATA="Off",
               TINYPROF_TRACE=" yes ", TINYPROF_MPI="maybe")
    prof = tinyprof.read(str(out))
    assert "start" not in prof.metadata and prof.trace.nranks == 2
    assert done.stderr.count("TINYPROF_MPI='maybe' is neither on (1, on, true, yes) nor off") == 2   # once per rank


def test_convert_a_cxx_profile_to_csv(build, tmp_path):
    out = tmp_path / "out"
    run([build("native/examples/heat.cpp"), 3, out], 2)
    result = subprocess.run([str(BIN / "tinyprof-convert"), str(out), "--to", "csv",
                             "-o", str(tmp_path / "heat.csv")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    with open(tmp_path / "heat.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    # per rank and execution: main, 3 compute, 3 exchange, 1 summed comm; rank 0 adds report
    assert len(rows) == 2 * 2 * 8 + 2
    assert {r["rank"] for r in rows} == {"0", "1"}


@pytest.mark.parametrize("nranks", [1, 3])
def test_threads_record_into_one_profile(build, tmp_path, nranks):
    out = tmp_path / "out"
    run([build("tests/native/threads.cpp"), out], nranks)
    prof = tinyprof.read(str(out))
    assert prof.callpaths == [("main",), ("main", "after"), ("task",), ("task", "step"),
                              ("task", "sum")]
    for rank in range(nranks):
        assert prof.executions(rank) == 2
        assert [len(ex) for ex in prof.series(("task",), rank)] == [4, 4]
        assert [len(ex) for ex in prof.series(("task", "step"), rank)] == [406, 406]
        assert [len(ex) for ex in prof.series(("task", "sum"), rank)] == [1, 1]
        assert [len(ex) for ex in prof.series(("main", "after"), rank)] == [1, 1]


def task_counts(prof, rank: int) -> List[float]:
    """[tasks, steps, step mem values, summed mem, leaves] in a profile of
    flush_threads.cpp. A flush may catch a value whose metric is not yet
    recorded: NaN (missing) counts as 0."""
    def values(path, metric="time"):
        return [v for ex in prof.series(path, rank, metric) for v in ex] if path in prof.callpaths else []
    step_mem = values(("task", "step"), "mem")
    assert all(v == 1.0 for v in step_mem if v == v)
    leaves = [p for p in prof.callpaths if len(p) == 2 and p[1].startswith("n")]
    return [len(values(("task",))), len(values(("task", "step"))), sum(v == 1.0 for v in step_mem),
            sum(v for v in values(("task", "sum"), "mem") if v == v),
            sum(len(values(p)) for p in leaves)]


@pytest.mark.parametrize("nranks", [0, 2])
def test_flush_while_threads_record(build, tmp_path, nranks):
    """Flushes while 4 threads record: no crash or hang (the timeout), and each
    profile holds every task finished before its flush and none that was not
    started after it; the final one, after the join, holds them all."""
    threads = 4
    out = tmp_path / "out"
    result = run([build("tests/native/flush_threads.cpp"), out, 10, *([] if nranks else ["--no-mpi"])],
                 nranks, timeout=120)
    bounds: Dict[str, Dict[int, Tuple[int, int]]] = {}
    for line in result.stdout.split("\n")[:-1]:
        k, rank, lo, hi = line.split()
        bounds.setdefault(k, {})[int(rank)] = (int(lo), int(hi))
    assert len(bounds) == 11
    for k, per_rank in bounds.items():
        prof = tinyprof.read(str(out / k))
        assert sorted(per_rank) == list(range(max(nranks, 1))) and prof.nranks == len(per_rank)
        for rank, (lo, hi) in per_rank.items():
            tasks, steps, step_mem, mem, leaves = task_counts(prof, rank)
            assert lo <= tasks <= hi, (k, rank)
            for n in (steps, leaves, mem / 2):
                assert lo <= n <= hi + threads, (k, rank)
            assert lo <= step_mem <= steps
            if k == "final":
                assert lo == hi and [tasks, steps, step_mem, mem, leaves] == [hi, hi, hi, 2 * hi, hi]
                assert prof.value(("task", "sum"), "tag") == 5.0


# Invalid UTF-8 of every kind (bad lead, encoded surrogate, truncated
# sequence, overlong form, above U+10FFFF, stray continuation) and valid text.
RAW_NAMES = [b"\xff\xfeabc", "é 漢字 €".encode(), b"\xed\xa0\x80", b"\xe2\x82A", b"\xc0\xaf",
             b"\xf4\x90\x80\x80", b"ok\x80", b"%\n\xf0\x9f\x98\x80"]


def names_profile(build, tmp_path) -> Path:
    out = tmp_path / "out"
    run([build("tests/native/names.cpp"), out, *(n.hex() for n in RAW_NAMES)])
    return out


def test_non_utf8_names_are_written_surrogate_escaped(build, tmp_path):
    data = (names_profile(build, tmp_path) / "prof_.0-of-1.tp").read_bytes()
    expected = [escape(raw.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogatepass")
                for raw in [b"main", *RAW_NAMES]]
    lines = data.split(b"\n")
    assert lines[1] == "name prof\udcff".encode("utf-8", "surrogatepass")
    at = lines.index(b"names %d" % len(expected))
    assert lines[at + 1:at + 1 + len(expected)] == expected


def test_non_utf8_names_read_back(build, tmp_path):
    prof = tinyprof.read(str(names_profile(build, tmp_path)))
    assert prof.name == "prof\udcff"
    assert prof.callpaths == [("main",)] + [("main", raw.decode("utf-8", "surrogateescape"))
                                            for raw in RAW_NAMES]


STEP = ("main", "step")


def expected_steps(rank: int, k: int) -> list:
    """tests/native/snapshot.cpp: rank's series of `main<step` (metric `it`) in snapshot k."""
    out, counted = [], 0
    for j in range(1, k + 1):
        n = (j * (rank + 1)) % 4
        out.append([float(i) for i in range(counted, counted + n)])
        out += [[]] if rank % 2 else []
        counted += n
    return out


@pytest.mark.parametrize("nranks,level", [(0, "none"), (1, "multiple"), (3, "multiple"), (5, "multiple"),
                                          (3, "funneled")])
def test_snapshots_hold_what_each_rank_had_recorded(build, tmp_path, nranks, level):
    """Snapshot k holds every rank's data as of its k-th trigger, in A = 2
    files (aggregated, MPI_THREAD_MULTIPLE) or one file per rank (no MPI, a
    lower thread level, with one warning), a full one then deltas; ranks run
    different numbers of executions; the job killed in an execution leaves
    snapshot 4 to read."""
    out = tmp_path / "out"
    result = run([build("tests/native/snapshot.cpp"), out, level, "all"], nranks, check=False)
    assert result.returncode != 0 and "did not end" not in result.stderr, result.stderr
    nprocs = max(nranks, 1)
    files = min(2, nprocs) if level == "multiple" else nprocs
    assert result.stderr.count("below MPI_THREAD_MULTIPLE") == (level == "funneled")
    assert tinyprof.snapshots(str(out)) == [1, 2, 3, 4]
    heads = {(out / "snapshots" / f"{k:06d}" / output_dir.file_name("snap", 0, files)).read_bytes().split(b"\n")[3]
             for k in range(1, 5)}
    assert heads == {b"set snapshot 1", b"set snapshot 2 over 1", b"set snapshot 3 over 2", b"set snapshot 4 over 3"}
    for k in range(1, 5):
        directory = output_dir.snapshot_dir(str(out), k)
        assert sorted(os.listdir(directory)) == [output_dir.file_name("snap", i, files) for i in range(files)]
        prof = tinyprof.read(str(out), snapshot=k)
        for rank in range(nprocs):
            assert prof.series(STEP, rank, "it") == expected_steps(rank, k), (k, rank)
    newest = tinyprof.read(str(out))            # what a killed job leaves: snapshot 4
    assert [newest.series(STEP, r, "it") for r in range(nprocs)] == \
        [expected_steps(r, 4) for r in range(nprocs)]
    assert not [p for p in out.rglob("*.tmp*")]


@pytest.mark.parametrize("level", ["multiple", "funneled"])
def test_keep_last_leaves_the_newest_snapshot(build, tmp_path, level):
    """Chains of 2 deltas: snapshot 4 is full, so 1 to 3 go: aggregated at
    once, per rank when rank 0 writes after every rank wrote 4 (it may be
    first: then the chain 1-3 stays whole, never a part of it)."""
    out = tmp_path / "out"
    run([build("tests/native/snapshot.cpp"), out, level, "last"], 3, check=False, TINYPROF_CHAIN="2")
    left = sorted(os.listdir(out / "snapshots"))
    assert left == ["000004"] or (level == "funneled" and left == ["000001", "000002", "000003", "000004"])
    assert tinyprof.read(str(out)).series(STEP, 2, "it") == expected_steps(2, 4)


def test_a_delta_of_occurrences_merged_from_threads(build, tmp_path):
    """Another thread's occurrences, merged in before this thread's newer
    one: the delta writes the field whole, so snapshot 2 reads as the flush."""
    out = tmp_path / "out"
    run([build("tests/native/snapshot_threads.cpp"), out])
    snap, flushed = tinyprof.read(str(out), snapshot=2), tinyprof.read(str(out / "thr.0-of-1.tp"))
    assert b"set snapshot 2 over 1" in (out / "snapshots" / "000002" / "thr.0-of-1.tp").read_bytes()
    works = flushed.series(("main", "work"), 0)
    assert [len(w) for w in works] == [1, 3]
    assert snap.series(("main", "work"), 0) == works


@pytest.mark.parametrize("stuck", ["recv", "compute"])     # not "mpi": pytest-mpi's keyword
def test_a_stuck_rank_delays_nobody(build, tmp_path, stuck):
    """Rank 0's application thread is stuck until the other ranks see
    snapshot 1 complete: its snapshot thread took part meanwhile."""
    out = tmp_path / "out"
    run([build("tests/native/stuck.cpp"), out, stuck], 3)
    prof = tinyprof.read(str(out), snapshot=1)
    assert prof.series(STEP, 0, "it") == [[0.0, 1.0]]
    assert prof.series(STEP, 1, "it")[0] == [0.0, 1.0]


def test_serial_program_flushes_when_the_profiler_goes(build, tmp_path):
    def body(s: RankScript) -> None:          # no MPI, no flush call
        s.profiler("serial", 0, "mem:1")
        s.enter("main")
        s.event("x", 5, values="mem:3")
        s.tick(1)
        s.exit()
    prof = tinyprof.read(str(run_cxx(build, tmp_path, body)))
    assert prof.series(("main",), 0) == [[6e-9]]
    assert prof.series(("main", "x"), 0, "mem") == [[3.0]]


def test_unicode_profile_name_gives_a_readable_set(build, tmp_path):
    def body(s: RankScript) -> None:
        s.profiler("h€at é", 0, "")
        s.event("main", 1)
        s.add("flush")
    out = run_cxx(build, tmp_path, body, 2)
    assert [p.name for p in out.iterdir()] == ["h_at__.0-of-1.tp"]
    assert tinyprof.read(str(out)).name == "h€at é"


# -- CMake ------------------------------------------------------------------------

# heat.cpp compiles the implementation itself; serial.cpp takes tinyprof::tinyprof's.
CMAKE_APP = """\
cmake_minimum_required(VERSION 3.16)
project(heat_app CXX)
{how}
add_executable(heat {example})
target_link_libraries(heat PRIVATE tinyprof::mpi tinyprof::header_only)
add_executable(serial serial.cpp)
target_link_libraries(serial PRIVATE tinyprof::tinyprof)
"""

SERIAL_APP = """\
#include <tinyprof/tinyprof.hpp>
int main(int, char** argv) {
    TinyProf::Profiler prof("serial");
    prof.set_outdir(argv[1]);
    { TINYPROF_REGION("main"); }
    TinyProf::flush();
}
"""


def cmake(*args: str, cwd: Path) -> None:
    result = subprocess.run(["cmake", *args], cwd=cwd, capture_output=True, text=True)
    assert result.returncode == 0, f"cmake {' '.join(args)}\n{result.stdout}\n{result.stderr}"


@pytest.mark.parametrize("route", ["add_subdirectory", "find_package"])
def test_cmake_routes(tmp_path, route):
    if shutil.which("cmake") is None:
        pytest.skip("no cmake")
    native = ROOT / "native"
    mpi = [f"-DMPI_CXX_COMPILER={MPICXX}", f"-DMPI_C_COMPILER={MPICXX.with_name('mpicc')}"]
    if route == "add_subdirectory":
        how = f'add_subdirectory("{native}" tinyprof)'
        prefix_args = []
    else:
        build_lib, prefix = tmp_path / "lib-build", tmp_path / "prefix"
        cmake("-S", str(native), "-B", str(build_lib), f"-DCMAKE_INSTALL_PREFIX={prefix}", *mpi,
              cwd=tmp_path)
        cmake("--build", str(build_lib), cwd=tmp_path)        # libtinyprof, libtinyprof_mpi
        cmake("--install", str(build_lib), cwd=tmp_path)
        how = "find_package(tinyprof REQUIRED)"
        prefix_args = [f"-DCMAKE_PREFIX_PATH={prefix}"]
    app = tmp_path / "app"
    app.mkdir()
    (app / "CMakeLists.txt").write_text(CMAKE_APP.format(how=how, example=native / "examples/heat.cpp"))
    (app / "serial.cpp").write_text(SERIAL_APP)
    cmake("-S", str(app), "-B", str(app / "build"), *mpi, *prefix_args,
          "-DCMAKE_CXX_FLAGS=-Wall -Wextra -Werror", cwd=tmp_path)
    cmake("--build", str(app / "build"), cwd=tmp_path)
    run([app / "build" / "heat", 2, tmp_path / "out"], 2)
    prof = tinyprof.read(str(tmp_path / "out"))
    assert prof.nranks == 2 and prof.mpi_recorded      # tinyprof::mpi linked: MPI recorded
    assert set(prof.mpi.op) >= {"Sendrecv"}
    run([app / "build" / "serial", tmp_path / "serial"])
    assert tinyprof.read(str(tmp_path / "serial")).callpaths == [("main",)]


@pytest.mark.parametrize("nranks", [1, 3])
def test_flush_at_mpi_finalize_with_an_open_event(build, tmp_path, nranks):
    def body(s: RankScript) -> None:          # no flush call; "main" still open at MPI_Finalize
        s.profiler("open", 0, "")
        s.enter("main")
        s.event("x", 5 + s.rank)
        s.event("x", 1)
    prof = tinyprof.read(str(run_cxx(build, tmp_path, body, nranks)))
    for rank in range(nranks):
        assert prof.series(("main",), rank) == [[]]
        assert prof.series(("main", "x"), rank) == [[(5 + rank) / 1e9, 1e-9]]


def syntax_check(source: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(MPICXX), "-std=c++17", "-fsyntax-only", *flags,
                           "-I", str(ROOT / "native/include"), str(source)],
                          capture_output=True, text=True)


@pytest.mark.parametrize("args,ok", [('"x", "tag:1"', False), ('"x", 0', True), ('"x", false', True),
                                     ('"x", 2, "tag:1"', True), ('"x", 1, ""', True)])
def test_constructor_overloads(tmp_path, args, ok):
    src = tmp_path / "ctor.cpp"
    src.write_text('#include <tinyprof/tinyprof.hpp>\n'
                   f'int main() {{ TinyProf::Event e({args}); }}\n')
    result = syntax_check(src)
    assert (result.returncode == 0) == ok, result.stderr
    if not ok:
        assert "deleted" in result.stderr


STRICT = ["-Wall", "-Wextra", "-Wpedantic", "-Wshadow", "-Wconversion", "-Wsign-conversion", "-Werror"]


def test_header_is_clean_under_strict_warnings():
    result = syntax_check(ROOT / "native/examples/heat.cpp", *STRICT)    # with the implementation
    assert result.returncode == 0, result.stderr


def test_each_detail_header_compiles_alone(tmp_path):
    """Each header includes what it uses: the include order cannot rot."""
    headers = sorted((ROOT / "native/include/tinyprof/detail").glob("*.hpp"))
    procs = []
    for header in headers:
        src = tmp_path / f"{header.stem}.cpp"
        src.write_text(f'#include "{header}"\n')
        procs.append((header.name, subprocess.Popen(
            [str(MPICXX), "-std=c++17", "-fsyntax-only", *STRICT, str(src)], stderr=subprocess.PIPE, text=True)))
    errors = [(name, *proc.communicate(), proc.returncode) for name, proc in procs]
    failed = {name: err for name, _, err, code in errors if code != 0}
    assert len(headers) >= 10 and not failed, failed


def test_the_implementation_is_linked_exactly_once(build, tmp_path):
    """Without a file that defines TINYPROF_IMPLEMENTATION, or with two, the
    link fails and says so."""
    build("tests/native/threads.cpp")
    objects = build.objects
    for given in ([objects["tests/native/threads.cpp"]],
                  [objects["native/examples/heat.cpp"], objects[IMPLEMENTATION]]):
        result = subprocess.run([str(MPICXX), *FLAGS, *map(str, given), "-o", str(tmp_path / "x")],
                                capture_output=True, text=True)
        assert result.returncode != 0
        assert "define_TINYPROF_IMPLEMENTATION_in_exactly_one_file" in result.stderr, result.stderr


def test_profiler_destructor_flushes_while_mpi_is_live(build, tmp_path):
    nranks = 2
    def body(s: RankScript) -> None:          # the Profiler goes before MPI_Finalize
        s.profiler("scoped", 0, "")
        s.event("main", 4)
        s.add("drop")
        s.event("main", 8)                    # after the Profiler: not written at MPI_Finalize
    prof = tinyprof.read(str(run_cxx(build, tmp_path, body, nranks)))
    assert [prof.series(("main",), r) for r in range(nranks)] == [[[4e-9]]] * nranks


def test_an_application_collecting_sigterm_with_sigwait_gets_it(build, tmp_path):
    """The snapshot thread starts with the application's signals blocked: a
    SIGTERM the application blocked, to sigwait() for later, is not delivered to it."""
    out = tmp_path / "out"
    proc = subprocess.Popen([build("tests/native/sigwait.cpp"), str(out)], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env())
    try:
        assert proc.stdout.readline() == "ready\n", proc.stderr.read()
        proc.send_signal(signal.SIGTERM)          # pending until the program collects it
        out_text, err = proc.communicate("go\n", timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (proc.returncode, out_text) == (0, f"got {int(signal.SIGTERM)}\n"), err
    assert tinyprof.read(str(out)).callpaths == [("main",)]
