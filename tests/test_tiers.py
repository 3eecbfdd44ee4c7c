"""The suite's tiers and tools (tests/conftest.py): a test is marked by the
folder it lives in and the fixtures it uses, and a test whose tool is missing
skips, or fails under CI=1 (.ci/run), where every tool is installed."""
from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import mpi, native
from helpers.browser import find_chromium
from helpers.mpi import needs_mpiexec
from helpers.tools import ROOT, TESTS

FAST = "not mpi and not browser and not native and not slow and not network"


def _missing(monkeypatch, tmp_path) -> None:
    """No tool anywhere: mpiexec and mpicxx point at nothing, PATH is empty."""
    monkeypatch.setattr(mpi, "MPIEXEC", str(tmp_path / "mpiexec"))
    monkeypatch.setattr(native, "MPICXX", tmp_path / "mpicxx")
    monkeypatch.setattr(native, "MPICC", tmp_path / "mpicc")
    monkeypatch.setenv("PATH", str(tmp_path))


@pytest.mark.parametrize("find", [mpi.require_mpiexec, native.require_mpicxx, native.require_mpicc, find_chromium])
def test_a_missing_tool_fails_under_ci(monkeypatch, tmp_path, find):
    _missing(monkeypatch, tmp_path)
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match="under CI=1 a missing tool fails"):
        find()


@pytest.mark.parametrize("find", [mpi.require_mpiexec, native.require_mpicxx, native.require_mpicc, find_chromium])
def test_a_missing_tool_skips_elsewhere(monkeypatch, tmp_path, find):
    _missing(monkeypatch, tmp_path)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no "):
        find()


def test_the_fast_tier_leaves_out_every_other_tier():
    """Collected with make check's expression: no mpiexec, Chromium, compiler
    or long run, whether marked by folder, by fixture (also through another
    fixture: traced_demo launches mpiexec) or by hand; the rest stays."""
    files = ["test_disabled.py", "views/test_report.py", "native/test_vectors.py",
             "runtime/test_flush_memory.py"]
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider",
                           "-m", FAST, *(str(TESTS / f) for f in files)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    got = {line.split("::")[1].split("[")[0] for line in done.stdout.splitlines() if "::" in line}
    assert got == {"test_a_zero_code_run_is_the_script_alone", "test_reading_commands_still_read",
                   "test_report_data_is_the_profile", "test_iterations_are_binned_to_a_bounded_size",
                   "test_snapshots_over_time", "test_the_command_writes_a_report_and_says_where",
                   "test_numbers_are_rounded_to_five_digits_as_printf_would"}


@needs_mpiexec
def test_a_test_that_launches_mpiexec_runs_in_a_serial_run():
    """pytest-mpi skips a test marked ``mpi`` in a run without --with-mpi when
    it sees the mark: the tier's mark must come after it looked, and not skip."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "mpi",
                           str(TESTS / "test_disabled.py") + "::test_the_demo_runs_without_a_profile"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr


def test_no_serial_test_is_named_mpi():
    """pytest-mpi skips, in a run without --with-mpi, every test whose keywords
    hold ``mpi``, a parameter id too (``test_help_loads_no_numpy[mpi]`` was
    skipped): tests/conftest.py stops the collection on such a name."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider",
                           str(TESTS / "test_imports.py")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[mpi]" not in done.stdout
