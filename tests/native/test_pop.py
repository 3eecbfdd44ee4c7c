"""The POP metrics of a C++ run (tests/native/pop.cpp, linked with
libtinyprof_mpi) are those of the same program in Python (tests/_pop_app.py):
the header's profiles hold each rank's inclusive time and MPI time per
callpath alike, so the same checks (tests/_pop_checks.py) hold."""
from __future__ import annotations

import _pop_checks
import pytest
from conftest import run
from test_mpi_capture import linked

import tinyprof
from tinyprof.analysis.pop import PopError

NRANKS = 4


@pytest.fixture(scope="module")
def pop_program(build):
    return linked(build, "tests/native/pop.cpp")


def test_cpp_compute_then_sync(pop_program, tmp_path):
    run([pop_program, tmp_path / "b", "balance", "0.5"], nranks=NRANKS, timeout=300)
    assert _pop_checks.balance(tinyprof.read(tmp_path / "b"), NRANKS) == []


def test_cpp_growing_imbalance_over_snapshots(pop_program, tmp_path):
    """The flushed profile: over the 4 steps rank r computes (4 + 2r) units,
    so main<step's load balance is 7/10. The C++ header's snapshots carry no
    mpi section (docs/native.md): the metrics over time say so in one line."""
    run([pop_program, tmp_path / "g", "growing", "0.25"], nranks=NRANKS, timeout=300)
    profile = tinyprof.read(tmp_path / "g")
    assert _pop_checks.only_barriers_below_main(profile) == []
    frame = profile.pop()
    step = frame[[p == _pop_checks.STEP for p in frame["callpath"]]].iloc[0]
    assert abs(step["load_balance"] - 0.7) <= _pop_checks.TOLERANCE, step
    assert tinyprof.snapshots(tmp_path / "g") == [1, 2, 3, 4]
    with pytest.raises(PopError, match=r"snapshot 1 holds no MPI data.*C\+\+ header's snapshots"):
        tinyprof.pop_history(tmp_path / "g")
