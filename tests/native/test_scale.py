"""The header unmodified under SimGrid SMPI (issue 32): built with smpicxx and no
special flag, run with smpirun at 256 simulated ranks on benchmarks/fattree.xml,
every rank's data read back exactly (benchmarks/scale.py's workload and check).

Skipped when smpicxx is missing and cannot be installed (apt-get, as root);
under CI=1 (.ci/run installs libsimgrid-dev) a missing smpicxx fails instead."""
from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest
from helpers.tools import ROOT, require

_spec = importlib.util.spec_from_file_location("scale_bench", ROOT / "benchmarks" / "scale.py")
assert _spec is not None and _spec.loader is not None
scale = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(scale)

RANKS, ITERATIONS = 256, 3
# smpicxx() installs libsimgrid-dev with apt-get when it is missing.
pytestmark = [pytest.mark.slow, pytest.mark.network]


@pytest.fixture(scope="module")
def workload(tmp_path_factory) -> Path:
    compiler, why = scale.smpicxx()
    return scale.build(require(compiler, "SimGrid's smpicxx", why),
                       tmp_path_factory.mktemp("smpi"))


def smpirun(workload: Path, tmp_path: Path, mode: str, aggregators: int = 0,
            config: tuple = ()) -> subprocess.CompletedProcess:
    done, _, _ = scale.run(workload, RANKS, tmp_path / "out", ITERATIONS, aggregators, mode, timeout=600,
                           config=config)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.parametrize("privatization", ["dlopen", "mmap"])
def test_flush_at_finalize_is_collective(workload, tmp_path, privatization):
    """Under SMPI no attribute is deleted at MPI_Finalize: before the fix each
    rank wrote a single-rank profile over the others'. (Before the other
    fixes, the header did not compile under smpicxx, `free(x)` being a macro,
    and the ranks shared one registry through GNU-unique symbols.) SMPI's
    default gives each rank a copy of the program (dlopen); the harness's mmap
    copies only its data segment, where a `__thread` variable was one for
    all ranks and rank 0 recorded every rank's events."""
    done = smpirun(workload, tmp_path, "finalize", config=(f"--cfg=smpi/privatization:{privatization}",))
    assert "tinyprof" not in done.stderr, done.stderr
    assert scale.check(tmp_path / "out", RANKS, ITERATIONS, RANKS // 16) > 0


def test_explicit_flush_with_aggregators_not_dividing_p(workload, tmp_path):
    """TinyProf::flush() before MPI_Finalize (the flush at MPI_Finalize then
    has nothing new to write), over 3 files; the phases' record is printed.
    Phase 1 moves distinct callpaths only: no rank receives a payload per
    rank, as the allgather it replaced did (16 bytes at least from each)."""
    done = smpirun(workload, tmp_path, "timed", aggregators=3)
    parts = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(parts) == 1, done.stdout
    assert 0 < parts[0]["sync_received_max"] < 16 * RANKS, parts
    scale.check(tmp_path / "out", RANKS, ITERATIONS, 3)


def test_no_snapshot_thread_under_smpi(workload, tmp_path):
    """A Profiler with snapshots: SMPI has only MPI_THREAD_SINGLE and a thread
    of a simulated rank crashes the run (getpid in it); the header says so
    once and starts none, and the profile is whole at MPI_Finalize."""
    done = smpirun(workload, tmp_path, "snapshots")
    warnings = [line for line in done.stderr.splitlines() if line.startswith("tinyprof:")]
    assert warnings == ["tinyprof: no snapshots under SimGrid SMPI (a simulated rank cannot have a helper "
                        "thread): the profile is written by flush() and at MPI_Finalize"], done.stderr
    assert "a snapshot was taken" not in done.stdout
    scale.check(tmp_path / "out", RANKS, ITERATIONS, RANKS // 16)


def test_no_gnu_unique_state(workload):
    """No state of the header is an STB_GNU_UNIQUE symbol, which the dynamic
    linker shares across the copies of the program SMPI loads, one per rank
    (only the CRC table, a constant, is one)."""
    symbols = subprocess.run(["readelf", "-sW", "-C", str(workload)], capture_output=True, text=True,
                             check=True).stdout
    unique = [line.split(None, 7)[-1] for line in symbols.splitlines() if " UNIQUE " in line]
    ours = [name for name in unique if "TinyProf" in name and "crc32" not in name]
    assert ours == [], ours
