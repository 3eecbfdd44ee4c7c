"""Unchanged MPI binaries (issue 35): libtinyprof_mpi preloaded into a C
program that knows nothing of tinyprof profiles the whole program under one
region named after it, with its MPI calls counted exactly, through the
documented ``mpiexec ... env LD_PRELOAD=...`` line and ``tinyprof run``; an
annotated C++ program keeps its own profile only; the program's output and
exit status stay its own, also when the profile cannot be written."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import BIN, MPIEXEC, run
from test_mpi_capture import check_run
from test_stacks import needs_sites

import tinyprof
from tinyprof.analysis import symbolize

HERE = Path(tinyprof.__file__).parent
LIB, WHOLE = HERE / "libtinyprof_mpi.so", HERE / "libtinyprof_whole.so"
MPICC = BIN / "mpicc"
pytestmark = pytest.mark.skipif(not (LIB.exists() and WHOLE.exists() and MPICC.exists()),
                                reason="libtinyprof_mpi.so, libtinyprof_whole.so or mpicc missing")

APP = r"""
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>

/* -O0: not inlined, and no tail call that would hide their frames; one
 * exported (-rdynamic), one static (no name from dladdr: from the reader's addr2line) */
void reduce_a(double *x) { MPI_Allreduce(MPI_IN_PLACE, x, 4, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); }
static void reduce_b(double *x) { MPI_Allreduce(MPI_IN_PLACE, x, 4, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); }

static MPI_Comm pairs;
static int token;

void *broadcast(void *arg) {          /* another thread than the one that initialised MPI */
    MPI_Bcast(&token, 1, MPI_INT, 0, pairs);
    return arg;
}

int main(int argc, char **argv) {
    int provided, rank, size;
    pthread_t thread;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_split(MPI_COMM_WORLD, rank / 2, rank, &pairs);
    double x[4] = {1, 2, 3, 4};
    for (int i = 0; i < 20; i++) reduce_a(x);
    for (int i = 0; i < 60; i++) reduce_b(x);
    token = rank;
    MPI_Sendrecv_replace(&token, 1, MPI_INT, (rank + 1) % size, 0, (rank + size - 1) % size, 0,
                         MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    pthread_create(&thread, NULL, broadcast, NULL);
    pthread_join(thread, NULL);
    MPI_Comm_free(&pairs);
    printf("rank %d of %d: %s %g\n", rank, size, argc > 1 ? argv[1] : "-", x[0]);
    MPI_Finalize();
    return rank == 0 ? 3 : 0;
}
"""


@pytest.fixture(scope="module")
def app(tmp_path_factory) -> Path:
    """The C program, built with the wheel's mpicc: -g and -rdynamic as for mpiP."""
    where = tmp_path_factory.mktemp("preload")
    (where / "app.c").write_text(APP)
    subprocess.run([str(MPICC), "-O0", "-g", "-rdynamic", "-pthread", str(where / "app.c"), "-o", str(where / "app")],
                   check=True, capture_output=True, text=True)
    return where / "app"


def check_profile(outdir: Path, nranks: int) -> None:
    prof = tinyprof.read(outdir)
    assert prof.name == "app" and prof.callpaths == [("app",)] and prof.nranks == nranks
    rows = {(r.callpath, r.rank, r.comm, r.op): (r.calls, r.bytes) for r in prof.mpi.itertuples()}
    for r in range(nranks):
        pair = "COMM_WORLD.split1" + (f"@{r // 2 * 2}" if nranks > 2 else "")
        assert rows[(("app",), r, "COMM_WORLD", "Allreduce")] == (80, 80 * 32)
        assert rows[(("app",), r, "COMM_WORLD", "Sendrecv_replace")] == (1, 4)
        assert rows[(("app",), r, "COMM_WORLD", "Comm_split")] == (1, 0)
        assert rows[(("app",), r, pair, "Bcast")] == (1, 4)
        assert rows[(("app",), r, pair, "Comm_free")] == (1, 0)
    assert len(rows) == 5 * nranks, sorted(rows)         # none of tinyprof's own traffic
    assert prof.comm_matrix().sum() == 4 * nranks
    made = prof.communicators[prof.communicators.comm.str.startswith("COMM_WORLD.split1")]
    assert len(made) == (nranks + 1) // 2 and list(made.created) == [("app",)] * len(made)
    for r in range(nranks):            # one occurrence: from MPI_Init to MPI_Finalize
        (region,), = prof.series(("app",), r)
        assert region > 0


def lines(out: str):
    return sorted(out.splitlines())


@pytest.mark.parametrize("nranks", [1, 3])
def test_a_preloaded_unchanged_binary_is_profiled_whole(app, tmp_path, nranks):
    plain = subprocess.run([str(MPIEXEC), "-n", str(nranks), str(app), "hi"], capture_output=True, text=True,
                           timeout=120, cwd=tmp_path)
    assert plain.returncode == 3 and not list(tmp_path.iterdir())
    proc = subprocess.run([str(MPIEXEC), "-n", str(nranks), "env", f"LD_PRELOAD={LIB}", str(app), "hi"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert (proc.returncode, lines(proc.stdout), proc.stderr) == (3, lines(plain.stdout), "")
    check_profile(tmp_path / "app.tinyprof", nranks)


def test_tinyprof_run(app, tmp_path):
    proc = subprocess.run([str(BIN / "tinyprof"), "run", "-n", "3", "-o", "prof", str(app), "hi"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=str(HERE.parent)))
    assert proc.returncode == 3, proc.stderr
    assert [line.rsplit(" ", 1)[0] for line in lines(proc.stdout)] == [f"rank {r} of 3: hi" for r in range(3)]
    check_profile(tmp_path / "prof", 3)


def _sites(exe: Path, cwd: Path, depth: int = 2):
    """``tinyprof run --site-depth`` on ``exe``: its profile, and the Allreduce
    calls per (callpath, rank)."""
    proc = subprocess.run([str(BIN / "tinyprof"), "run", "-n", "3", "--site-depth", str(depth), "-o", "prof",
                           str(exe)], capture_output=True, text=True, timeout=120, cwd=cwd,
                          env=dict(os.environ, PYTHONPATH=str(HERE.parent)))
    assert proc.returncode == 3, proc.stderr
    prof = tinyprof.read(cwd / "prof")
    calls = {(r.callpath, r.rank): r.calls for r in prof.mpi.itertuples() if r.op == "Allreduce"}
    return prof, calls


def _line(text: str) -> int:
    """The line of APP (as written to app.c) that holds ``text``."""
    found, = [n for n, line in enumerate(APP.split("\n"), 1) if text in line]
    return found


def test_call_sites(app, tmp_path):
    """--site-depth 2: each Allreduce is charged to main's line that called
    reduce_a (20 per rank) or reduce_b (60), then to the line in it, read back
    as `function (app.c:line)`, the static function's too (-g)."""
    prof, calls = _sites(app, tmp_path)
    sites = [("app", f"main (app.c:{_line(f'{f}(x);')})", f"{f} (app.c:{_line(f'void {f}(')})")
             for f in ("reduce_a", "reduce_b")]
    assert calls == {(path, r): n for path, n in zip(sites, (20, 60)) for r in range(3)}
    assert prof.metadata["site_objects"].startswith(f"app\t{app.stat().st_size}\t{app.stat().st_mtime_ns}\t{app}\n")
    shown = subprocess.run([str(BIN / "tinyprof"), "mpi", str(tmp_path / "prof")], capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=str(HERE.parent)))
    assert shown.returncode == 0 and sites[1][2] in shown.stdout, shown.stdout + shown.stderr


def test_call_sites_at_depth_1(app, tmp_path):
    """--site-depth 1 (the wrapper's own return address, no unwinding): each
    Allreduce at its line in reduce_a or reduce_b; the calls from main and
    from the second thread at theirs."""
    prof, calls = _sites(app, tmp_path, 1)
    assert calls == {(("app", f"{f} (app.c:{_line(f'void {f}(')})"), r): n
                     for f, n in (("reduce_a", 20), ("reduce_b", 60)) for r in range(3)}
    rows = {(r.callpath, r.op) for r in prof.mpi.itertuples() if r.op != "Allreduce"}
    assert rows == {(("app", f"main (app.c:{_line(text)})"), op) for text, op in
                    (("MPI_Comm_split(", "Comm_split"), ("MPI_Sendrecv_replace(", "Sendrecv_replace"),
                     ("MPI_Comm_free(", "Comm_free"))} | \
        {(("app", f"broadcast (app.c:{_line('MPI_Bcast(')})"), "Bcast")}, rows


def test_call_sites_without_debug_info(tmp_path):
    """Built without -g nor -rdynamic: no lines, but every function named from
    the symbol table, the static one too, at its object and offset."""
    (tmp_path / "app.c").write_text(APP)
    subprocess.run([str(MPICC), "-O0", "-pthread", str(tmp_path / "app.c"), "-o", str(tmp_path / "app")],
                   check=True, capture_output=True, text=True)
    _, calls = _sites(tmp_path / "app", tmp_path)
    if not shutil.which("addr2line"):
        pytest.skip("needs addr2line (binutils)")
    named = sorted({tuple(re.sub(r"\+0x[0-9a-f]+\)$", ")", name) for name in path) for path, _ in calls})
    assert named == [("app", "main (app)", "reduce_a (app)"), ("app", "main (app)", "reduce_b (app)")], calls


def test_call_sites_of_a_changed_or_removed_binary_keep_their_offsets(app, tmp_path):
    """A binary rebuilt (another size or time) or removed since the run: its
    sites read back as written, `function (object+0xoffset)` (`?` for a
    static function), offsets that addr2line turns into the calling lines."""
    exe = tmp_path / "app"
    shutil.copy(app, exe)
    resolved = _sites(exe, tmp_path)[1]
    assert all("app.c:" in path[2] for path, _ in resolved)
    os.utime(exe, ns=(0, 0))
    raw = tinyprof.read(tmp_path / "prof")
    calls = {(r.callpath, r.rank): r.calls for r in raw.mpi.itertuples() if r.op == "Allreduce"}
    sites = sorted({path for path, _ in calls})
    assert [[name.split(" ")[0] for name in path] for path in sites] == [["app", "main", "reduce_a"],
                                                                         ["app", "main", "?"]], sites
    assert all(re.fullmatch(r"(\w+|\?) \(app\+0x[0-9a-f]+\)", name) for path in sites for name in path[1:]), sites
    assert sorted(calls.values()) == sorted(resolved.values()) == [20] * 3 + [60] * 3
    addr2line = shutil.which("addr2line")
    if addr2line:
        source = [subprocess.run([addr2line, "-e", str(exe), path[2].split("+")[1][:-1]], capture_output=True,
                                 text=True).stdout for path in sites]
        assert [line.split(":")[0] for line in source] == [str(app) + ".c"] * 2, source
        assert [int(line.split(":")[1].split()[0]) for line in source] == \
            [_line("void reduce_a("), _line("void reduce_b(")], source
    exe.unlink()
    assert tinyprof.read(tmp_path / "prof").callpaths == raw.callpaths


HOSTILE = r"""
import os, sys, tinyprof
exe, offset, many = sys.argv[1], int(sys.argv[2], 16), int(sys.argv[3])
st = os.stat(exe)
same = f"{st.st_size}\t{st.st_mtime_ns}\t{exe}\n"
tinyprof.Profiler("hostile", outdir="out",
                  metadata={"site_objects": f"app\t{same}bad line\nnope\tx\t1\t/nope\nlate\t{same}"})
names = ["main (app+0xzz)", "x (app+0x)", " (app+0x10)", "(app+0x1)", "f (app+0x" + "f" * 17 + ")",
         "f (nope+0x10)", "a (b (app+0x11)", "f (app+0x10", "f (other+0x10)", "user region",
         f"one (app+0x{offset:x})", f"two (app+0x{offset:x}0000)", f"one (late+0x{offset:x})",
         f"next (app+0x{offset + 1:x})"]
for name in names:
    with tinyprof.Event(name):
        pass
with tinyprof.Event("many"):
    for k in range(many):
        with tinyprof.Event(f"? (app+0x{k + (1 << 40):x})"):
            pass
tinyprof.flush()
"""


def test_names_that_are_not_call_sites_are_left_alone(app, tmp_path, monkeypatch):
    """A profile (written here by Python) whose names look almost like sites,
    whose `site_objects` has bad lines, and with more sites than are resolved:
    it reads, each name as written but the real sites within the bound, two
    of one line told apart by their offsets."""
    raw = subprocess.run(["nm", str(app)], capture_output=True, text=True).stdout if shutil.which("nm") else ""
    start = [line.split()[0] for line in raw.splitlines() if line.endswith(" reduce_a")]
    if not (start and shutil.which("addr2line")):
        pytest.skip("needs nm and addr2line (binutils)")
    monkeypatch.setattr(symbolize, "MAX_ADDRESSES", 50)     # the late object's site is past it
    (tmp_path / "hostile.py").write_text(HOSTILE)
    subprocess.run([sys.executable, "hostile.py", str(app), start[0], "48"], check=True, cwd=tmp_path,
                   env=dict(os.environ, PYTHONPATH=str(HERE.parent)), timeout=120)
    prof = tinyprof.read(tmp_path / "out")
    hex_start = start[0].lstrip("0")
    assert [path[0] for path in prof.callpaths if len(path) == 1] == [
        "main (app+0xzz)", "x (app+0x)", " (app+0x10)", "(app+0x1)", "f (app+0x" + "f" * 17 + ")",
        "f (nope+0x10)", "a (b (app+0x11)", "f (app+0x10", "f (other+0x10)", "user region",
        f"reduce_a (app.c:{_line('void reduce_a(')}, app+0x{hex_start})", f"two (app+0x{hex_start}0000)",
        f"one (late+0x{hex_start})", f"reduce_a (app.c:{_line('void reduce_a(')}, app+0x{int(start[0], 16) + 1:x})",
        "many"]
    assert [path[1] for path in prof.callpaths if len(path) == 2] == [f"? (app+0x{k + (1 << 40):x})" for k in range(48)]


def test_without_addr2line_sites_keep_their_offsets(app, tmp_path, monkeypatch):
    """No addr2line on PATH: said once, and the names stay as written."""
    raw = subprocess.run(["nm", str(app)], capture_output=True, text=True).stdout if shutil.which("nm") else ""
    start = [line.split()[0] for line in raw.splitlines() if line.endswith(" reduce_a")]
    if not start:
        pytest.skip("needs nm (binutils)")
    exe = tmp_path / "app"          # a file of its own: nothing resolved for it yet
    shutil.copy(app, exe)
    (tmp_path / "hostile.py").write_text(HOSTILE)
    subprocess.run([sys.executable, "hostile.py", str(exe), start[0], "0"], check=True, cwd=tmp_path,
                   env=dict(os.environ, PYTHONPATH=str(HERE.parent)), timeout=120)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.warns(RuntimeWarning, match="no addr2line") as said:
        names = [tinyprof.read(tmp_path / "out").callpaths for _ in range(2)][1]
    assert len(said) == 1 and (f"one (app+0x{start[0].lstrip('0')})",) in names


@pytest.mark.parametrize("outdir", ["file", "file/prof"])
def test_a_profile_that_cannot_be_written_never_fails_the_program(app, tmp_path, outdir):
    (tmp_path / "file").write_text("not a directory")
    proc = run(["env", f"LD_PRELOAD={LIB}", f"TINYPROF_OUTDIR={tmp_path / outdir}", app, "hi"], nranks=3,
               check=False)
    assert proc.returncode == 3 and len(proc.stdout.splitlines()) == 3, proc.stdout + proc.stderr
    warnings = proc.stderr.splitlines()
    assert len(warnings) == 1 and warnings[0].startswith(f"tinyprof: cannot write profile file {tmp_path / outdir}/"), \
        proc.stderr
    assert (tmp_path / "file").read_text() == "not a directory"


def test_tinyprof_off_turns_it_off(app, tmp_path):
    proc = subprocess.run([str(MPIEXEC), "-n", "2", "env", f"LD_PRELOAD={LIB}", "TINYPROF= Off", str(app)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 3 and not list(tmp_path.iterdir()), proc.stderr


def test_an_annotated_program_is_not_profiled_twice(build, tmp_path):
    """mpi_capture.cpp has a Profiler of its own: its profile holds exactly its
    calls (check_run), and the whole-program one writes nothing, not even the
    run marker it would leave in an existing directory of its name."""
    exe = build("tests/native/mpi_capture.cpp")
    (tmp_path / "mpi_capture.tinyprof").mkdir()
    proc = subprocess.run([str(MPIEXEC), "-n", "3", "env", f"LD_PRELOAD={LIB}", str(exe), str(tmp_path / "prof")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    check_run(tmp_path / "prof", 3, 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mpi_capture.tinyprof", "prof"]
    assert not list((tmp_path / "mpi_capture.tinyprof").iterdir())


FORTRAN = """
program app
  use iso_c_binding
  implicit none
  interface       ! MPI's C entry points: the mpich wheel has no Fortran bindings
    integer(c_int) function mpi_init(argc, argv) bind(C, name="MPI_Init")
      import
      type(c_ptr), value :: argc, argv
    end function
    integer(c_int) function mpi_allreduce(s, r, n, t, op, comm) bind(C, name="MPI_Allreduce")
      import
      integer(c_intptr_t), value :: s
      real(c_double) :: r(*)
      integer(c_int), value :: n, t, op, comm
    end function
    integer(c_int) function mpi_finalize() bind(C, name="MPI_Finalize")
      import
    end function
  end interface
  integer(c_int) :: ierr
  integer :: i
  real(c_double) :: x(4) = 1
  ierr = mpi_init(c_null_ptr, c_null_ptr)
  do i = 1, 80       ! MPI_IN_PLACE, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD as MPICH's mpi.h defines them
    ierr = mpi_allreduce(-1_c_intptr_t, x, 4, int(z'4c00080b', c_int), int(z'58000003', c_int), &
                         int(z'44000000', c_int))
  end do
  print '(es10.3)', x(1)
  ierr = mpi_finalize()
end program app
"""


@pytest.mark.skipif(shutil.which("gfortran") is None, reason="no gfortran (apt-get install gfortran)")
def test_a_fortran_binary(tmp_path):
    """A Fortran program built by gfortran, its MPI calls counted exactly.
    Through ISO_C_BINDING: the mpich wheel ships no Fortran bindings (mpif.h,
    `use mpi`, libmpifort), so those are not tested here."""
    (tmp_path / "app.f90").write_text(FORTRAN)
    libs = [a for a in subprocess.run([str(MPICC), "-show"], capture_output=True, text=True).stdout.split()
            if a.startswith(("-L", "-l", "-Wl,"))]
    subprocess.run(["gfortran", str(tmp_path / "app.f90"), "-o", str(tmp_path / "app"), *libs], check=True)
    proc = run(["env", f"LD_PRELOAD={LIB}", f"TINYPROF_OUTDIR={tmp_path / 'prof'}", tmp_path / "app"], nranks=2)
    assert proc.stdout.split() == ["1.209E+24"] * 2       # 2 ** 80
    prof = tinyprof.read(tmp_path / "prof")
    rows = {(r.callpath, r.rank, r.op): (r.calls, r.bytes) for r in prof.mpi.itertuples()}
    assert rows == {(("app",), r, "Allreduce"): (80, 80 * 32) for r in range(2)}


@needs_sites
def test_python_under_the_preload_keeps_its_own_profile(tmp_path):
    """`python -m tinyprof` with the library preloaded: tinyprof in Python
    starts capture, so the whole-program profile of the interpreter stands
    down; the script's profile holds exactly its calls, at their Python line
    (`python -m tinyprof` records call sites at depth 1 by default)."""
    pytest.importorskip("mpi4py")
    (tmp_path / "app.py").write_text(
        "import numpy as np\nfrom mpi4py import MPI\n"
        "for _ in range(5):\n    MPI.COMM_WORLD.Allreduce(MPI.IN_PLACE, np.ones(4))\n")
    proc = subprocess.run([str(MPIEXEC), "-n", "2", "env", f"LD_PRELOAD={LIB}", sys.executable, "-m", "tinyprof",
                           "-o", "prof", "app.py"], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=str(HERE.parent)))
    assert proc.returncode == 0, proc.stderr
    prof = tinyprof.read(tmp_path / "prof")
    rows = {(r.callpath, r.rank, r.op): r.calls for r in prof.mpi.itertuples()}
    assert rows == {(("app.py", "<module> (app.py:4)"), r, "Allreduce"): 5 for r in range(2)}   # its Python site
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.py", "prof"]
