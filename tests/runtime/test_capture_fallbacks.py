"""``mpi=True`` when MPI capture cannot work: one clear warning, and the
profile of the events is written as always (each in a fresh interpreter:
the serial suite never imports mpi4py itself)."""
from __future__ import annotations

import importlib.util

import pytest

import tinyprof
from tinyprof.runtime.settings import Settings

needs_mpi4py = pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None,
                                  reason="needs mpi4py (pip install mpi4py mpich)")

RECORD = """
    import warnings
    import tinyprof
    {setup}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tinyprof.Profiler("fb", outdir="out", mpi=True)
        with tinyprof.Event("main"):
            pass
        tinyprof.flush()
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1, messages
    print(messages[0])
    p = tinyprof.read("out")
    assert p.callpaths == [("main",)] and not p.mpi_recorded and p.mpi.empty
"""


def test_without_mpi_it_warns_and_profiles(run_python, tmp_path):
    out = run_python(RECORD.format(setup="import sys; sys.modules['mpi4py'] = None"), cwd=tmp_path)
    assert out.stdout.strip() == "tinyprof: mpi=True, but MPI is not running (mpi4py): " \
                                 "no MPI data is recorded"


@needs_mpi4py
def test_without_the_library_it_warns_and_profiles(run_python, tmp_path):
    setup = "from mpi4py import MPI; from tinyprof.runtime import capture as _capture; _capture.LIBRARY = '/nowhere/lib.so'"
    out = run_python(RECORD.format(setup=setup), cwd=tmp_path)
    assert out.stdout.startswith("tinyprof: MPI communication is not recorded: lib.so not built, "
                                 "and no record of its build (/nowhere/lib.so.build-error)")


def test_the_setting_and_its_environment_variable(monkeypatch, tmp_path):
    assert Settings.create().mpi is False
    monkeypatch.setenv("TINYPROF_MPI", "1")
    assert Settings.create().mpi is True and Settings.create(mpi=False).mpi is False
    with pytest.raises(TypeError, match="mpi must be True or False"):
        Settings.create(mpi="yes")
    assert tinyprof.Profiler("s", outdir=str(tmp_path), mpi=False).mpi is False
