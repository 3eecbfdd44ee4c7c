"""The POP metrics of a C++ run (tests/native/pop.cpp, linked with
libtinyprof_mpi) are those of the same program in Python (tests/_pop_app.py):
the header's profiles hold each rank's inclusive time and MPI time per
callpath alike, its snapshots their MPI data, its traces the calls and
messages, so the same checks (tests/helpers/pop_checks.py) hold."""
from __future__ import annotations

import pytest
from helpers import pop_checks
from helpers.mpi_capture import linked
from helpers.native import run

import tinyprof

NRANKS = 4
SYNC = (*pop_checks.STEP, "sync")


@pytest.fixture(scope="module")
def pop_program(build):
    return linked(build, "tests/native/pop.cpp")


def test_cpp_pipeline_and_transfer_split(pop_program, tmp_path):
    """Traced C++ runs give the serialization/transfer split of the Python
    ones (tests/analysis/test_pop.py): the header's trace section replays alike."""
    run([pop_program, tmp_path / "p", "pipeline", "0.2"], nranks=NRANKS, timeout=300)
    assert pop_checks.pipeline(tinyprof.read(tmp_path / "p")) == []
    run([pop_program, tmp_path / "x", "transfer", "0.2"], nranks=NRANKS, timeout=300)
    assert pop_checks.transfer(tinyprof.read(tmp_path / "x")) == []


def test_cpp_compute_then_sync(pop_program, tmp_path):
    run([pop_program, tmp_path / "b", "balance", "0.5"], nranks=NRANKS, timeout=300)
    assert pop_checks.balance(tinyprof.read(tmp_path / "b"), NRANKS) == []


@pytest.mark.parametrize("level", ["multiple", "single"])
def test_cpp_growing_imbalance_over_snapshots(pop_program, tmp_path, level):
    """The C++ header's snapshots carry the mpi section, aggregated
    (MPI_THREAD_MULTIPLE) and per rank (MPI_THREAD_SINGLE) alike: the
    metrics over time are those of the Python run, the step's load balance
    (1 + k/2) / (1 + k) per interval. The flushed profile: over the 4 steps
    rank r computes (4 + 2r) units, so main<step's load balance is 7/10."""
    run([pop_program, tmp_path / "g", "growing", "0.25", level], nranks=NRANKS, timeout=300)
    profile = tinyprof.read(tmp_path / "g")
    assert pop_checks.only_barriers_below_main(profile) == []
    frame = profile.pop()
    step = frame[[p == pop_checks.STEP for p in frame["callpath"]]].iloc[0]
    assert abs(step["load_balance"] - 0.7) <= pop_checks.TOLERANCE, step
    assert pop_checks.growing(tmp_path / "g") == []
    # snapshot k holds the k barriers of every rank so far in main<step<sync,
    # and the one before main; the last one all the calls of the flushed profile
    def calls(prof):
        return prof.mpi.groupby(["callpath", "rank", "op"])["calls"].sum().to_dict()
    for k in (1, 4):
        snap = tinyprof.read(tmp_path / "g", snapshot=k)
        assert len(snap.files) == (1 if level == "multiple" else NRANKS)
        assert calls(snap) == {**{((), r, "Barrier"): 1 for r in range(NRANKS)},
                               **{(SYNC, r, "Barrier"): k for r in range(NRANKS)}}
    assert calls(snap) == calls(profile)
    # nothing of the program's MPI after snapshot 4: its section is the flush's,
    # but for the TSC's conversion to ns, done at each write (docs/mpi.md: 1e-4 at most)
    key = ["callpath", "rank", "comm", "op", "bucket", "calls", "bytes"]
    last, flushed = (p.mpi.sort_values(key) for p in (snap, profile))
    assert last[key].values.tolist() == flushed[key].values.tolist()
    assert list(last["time"]) == pytest.approx(list(flushed["time"]), rel=1e-4)
