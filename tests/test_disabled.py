"""``TINYPROF=0``: every entry point lets the application run untouched,
writes nothing, and ends without a traceback (docs/guide.md)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers.mpi import MPIEXEC, needs_mpiexec

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "fig3.tp")
APP = "import sys\nprint('app', sys.argv[1:])\nsys.exit(3)\n"


def run(*argv, cwd):
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TINYPROF="0"))


@needs_mpiexec
def test_the_demo_runs_without_a_profile(tmp_path):
    done = run(sys.executable, "-m", "tinyprof.demo", "--run", "-n", "2", "--steps", "40",
               str(tmp_path / "demo"), cwd=tmp_path)         # 2 of its snapshots due
    assert done.returncode == 0 and done.stderr == "", done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("heat: 2 ranks, 40 steps") and "profiling off (TINYPROF=0)" in lines[0]
    assert lines[-1] == ("tinyprof.demo: profiling is off (TINYPROF=0): the solver ran, "
                         "no profile was written")
    assert os.listdir(tmp_path) == []


def test_a_zero_code_run_is_the_script_alone(tmp_path):
    (tmp_path / "app.py").write_text(APP)
    plain = run(sys.executable, "app.py", "-o", "x", cwd=tmp_path)
    profiled = run(sys.executable, "-m", "tinyprof", "app.py", "-o", "x", cwd=tmp_path)
    assert (profiled.returncode, profiled.stdout, profiled.stderr) == \
        (plain.returncode, plain.stdout, plain.stderr) == (3, "app ['-o', 'x']\n", "")
    assert os.listdir(tmp_path) == ["app.py"]


@needs_mpiexec
@pytest.mark.parametrize("how", [["-m", "tinyprof.tune"], ["-m", "tinyprof.cli", "tune"]])
def test_tune_says_there_is_nothing_to_measure(tmp_path, how):
    done = run(MPIEXEC, "-n", "2", sys.executable, *how, "--callpaths", "5", "--iterations", "2",
               "--repeats", "1", "--outdir", str(tmp_path / "scratch"), cwd=tmp_path)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "tinyprof tune: profiling is off (TINYPROF=0): there is no flush to measure"]


def test_reading_commands_still_read(tmp_path):
    done = run(sys.executable, "-m", "tinyprof.cli", "show", GOLDEN, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("fig2: 2 ranks, 5 callpaths")
