"""MPI capture in C++: the header's `mpi` section codec against the Python
reference, and real runs of a program linked with libtinyprof_mpi whose
traffic the test counts itself (docs/native.md, "MPI communication")."""
from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest
from helpers.mpi_capture import ITERATIONS, LIB, check_run, driver_input, linked, random_section, read_section
from helpers.native import run

from tinyprof.format import mpi_section, reader


def test_encoder_matches_the_python_codec(build):
    exe = build("tests/native/mpi_encode.cpp")
    rng = random.Random(12)
    for _ in range(60):
        comms, ops, peers = random_section(rng)
        out = subprocess.run([str(exe)], input=driver_input(comms, ops, peers).encode(),
                             capture_output=True, check=True, timeout=30).stdout
        assert out == mpi_section.encode(comms, ops, peers)


def test_empty_section_matches(build):
    out = subprocess.run([str(build("tests/native/mpi_encode.cpp"))], input=b"", capture_output=True,
                         check=True, timeout=30).stdout
    assert out == mpi_section.encode([], [], []) == b"comms 0\nops 0\npeers 0\n"


# -- a real run ---------------------------------------------------------------

@pytest.fixture(scope="module")
def capture_program(build) -> Path:
    return linked(build, "tests/native/mpi_capture.cpp")


@pytest.mark.parametrize("nranks,aggregators", [(3, 1), (4, 2)])
def test_real_run_counts_exactly_the_program_traffic(capture_program, tmp_path, nranks, aggregators):
    run([capture_program, tmp_path / "prof"], nranks=nranks, TINYPROF_AGGREGATORS=str(aggregators))
    check_run(tmp_path / "prof", nranks, aggregators)


def test_preloaded_library_captures_an_unlinked_program(build, tmp_path):
    if not LIB.exists():
        pytest.skip(f"no {LIB} (built by setup.py with the environment's mpicc)")
    exe = build("tests/native/mpi_capture.cpp")         # no -ltinyprof_mpi
    run(["env", f"LD_PRELOAD={LIB}", exe, tmp_path / "prof"], nranks=3)
    check_run(tmp_path / "prof", 3, 1)


def test_matrix_of_the_run(capture_program, tmp_path):
    """The point-to-point bytes from world rank i to j, summed over the file."""
    nranks = 4
    run([capture_program, tmp_path / "prof"], nranks=nranks)
    (_, section, _), = read_section(tmp_path / "prof")
    matrix = [[0] * nranks for _ in range(nranks)]
    for r, _line, _comm, peer, _m, nbytes in section.peers:
        matrix[r][peer] += nbytes
    n = 2 * ITERATIONS
    assert matrix == [[n * 128 * (j == (i + 1) % nranks) + n * 20 * (j == (i + 2) % nranks)
                       for j in range(nranks)] for i in range(nranks)]


def test_capture_off_by_environment(capture_program, tmp_path):
    run([capture_program, tmp_path / "prof"], nranks=2, TINYPROF_MPI="0")
    for path in (tmp_path / "prof").glob("mpicap.*.tp"):
        assert "mpi" not in reader.parse_file(str(path)).sections
