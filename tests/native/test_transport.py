"""The transport view in C++ (TINYPROF_UCX=1): the header's transport and
ucx blocks byte for byte as tinyprof.format.mpi_section writes them, the reading of
UCX's protocol tables by libtinyprof_mpi (which classifies for the header and
for Python) against the golden answers, and real runs of transport.cpp
linked with libtinyprof_mpi under MPIR_CVAR_NOLOCAL=1 (docs/native.md)."""
from __future__ import annotations

import ctypes
import random
import subprocess
from pathlib import Path

import pytest
from helpers.mpi import needs_capture_library
from helpers.mpi_capture import driver_input, linked, random_section
from helpers.native import ROOT, run

import tinyprof
from tinyprof.format import mpi_section
from tinyprof.format.mpi_section import NONE
from tinyprof.runtime import capture

TABLES = ROOT / "tests" / "golden" / "ucx_tables.txt"
CLASSIFIED = ROOT / "tests" / "golden" / "ucx_classified.txt"
LARGE, SMALL = 800_000, 64


def random_transport(rng: random.Random):
    rows = {}
    for _ in range(rng.randint(0, 12)):
        key = (rng.randint(0, 5), rng.choice([NONE, rng.randint(0, 20)]), rng.choice(["", "Send", "Isend"]),
               rng.choice(["tag_send", "tag_recv", "put"]), rng.choice(["", "eager short", "rendezvous zcopy"]),
               rng.choice(["", "tcp/eth0", "sysv/memory, cma/memory"]))
        rows[key] = (rng.randint(1, 9), rng.choice([0, 8, 2**40]))
    states = [(r, rng.choice(mpi_section.UCX_STATES)) for r in rng.sample(range(6), rng.randint(0, 3))]
    return [(*k, *v) for k, v in rows.items()], states


def test_encoder_matches_the_python_codec(build):
    exe = build("tests/native/mpi_encode.cpp")
    rng = random.Random(17)
    for _ in range(40):
        comms, ops, peers = random_section(rng)
        transport, states = random_transport(rng)
        text = driver_input(comms, ops, peers) + "".join(
            "transport " + "|".join("" if v == NONE else str(v) for v in row) + "\n" for row in transport) + \
            "".join(f"ucx {rank} {state}\n" for rank, state in states)
        out = subprocess.run([str(exe)], input=text.encode(), capture_output=True, check=True, timeout=30).stdout
        assert out == mpi_section.encode(comms, ops, peers, transport, states)


def golden_queries():
    """The queries of tests/golden/ucx_classified.txt and the answer line of each."""
    rows = [line.split("|") for line in CLASSIFIED.read_text().splitlines() if not line.startswith("#")]
    return [(int(code), int(size)) for code, size, *_ in rows], ["|".join(row) for row in rows]


@needs_capture_library
def test_tables_read_as_recorded():
    lib = capture._check(capture._bind(ctypes.CDLL(capture.LIBRARY)))
    text = TABLES.read_bytes()
    queries, want = golden_queries()
    protocol, transport = ctypes.create_string_buffer(256), ctypes.create_string_buffer(256)
    out = []
    for code, size in queries:
        assert 0 <= lib.tinyprof_ucx_classify(text, code, size, protocol, transport, 256) <= 256
        out.append("|".join(b.value.decode() for b in (protocol, transport)))
    assert [f"{c}|{s}|{lib.tinyprof_ucx_op_name(c).decode()}|{line}" for (c, s), line in zip(queries, out)] == want
    assert "rendezvous zero-copy read from remote|rc/mlx5_0:1, rc/mlx5_1:1" in out
    assert "zero-copy|cma/memory" in out                       # put: "... to host"


@pytest.fixture(scope="module")
def program(build) -> Path:
    return linked(build, "tests/native/transport.cpp")


def rows(prof, region, rank):
    t = prof.transport
    return t[t.callpath.map(lambda p: p == (region,)) & (t["rank"] == rank)][
        ["op", "ucp_op", "calls", "bytes"]].values.tolist()


def test_real_run_eager_and_rendezvous(program, tmp_path):
    run([program, tmp_path / "prof"], nranks=3, TINYPROF_UCX="1", MPIR_CVAR_NOLOCAL="1")
    prof = tinyprof.read(str(tmp_path / "prof"))
    assert prof.ucx == {0: "used", 1: "used", 2: "unused"}
    assert rows(prof, "small", 0) == [["Send", "tag_send", 10, 10 * SMALL]]
    assert rows(prof, "large", 0) == [["Send", "tag_send", 3, 3 * LARGE]]
    assert rows(prof, "small", 1) == [["Recv", "tag_recv", 10, 10 * SMALL]]
    assert rows(prof, "post", 1) == [["Irecv", "tag_recv", 1, LARGE]]     # completed in "wait"
    assert rows(prof, "post", 0) == [["Isend", "tag_send", 1, LARGE]]
    t = prof.transport
    sends = t[t.ucp_op == "tag_send"]
    protocol = dict(zip(sends.callpath, sends.protocol))
    assert protocol[("small",)].startswith("eager") and protocol[("large",)].startswith("rendezvous")
    assert protocol[("post",)] == protocol[("large",)]
    assert all(sends.transport != "")
    assert set(t.callpath) == {("small",), ("large",), ("post",)}    # nothing of the header's own


def test_without_nolocal_or_without_the_flag(program, tmp_path):
    run([program, tmp_path / "a"], nranks=2, TINYPROF_UCX="1")
    prof = tinyprof.read(str(tmp_path / "a"))
    assert prof.ucx == {0: "unused", 1: "unused"} and prof.transport.empty
    run([program, tmp_path / "b"], nranks=2, MPIR_CVAR_NOLOCAL="1")
    prof = tinyprof.read(str(tmp_path / "b"))
    assert prof.ucx == {} and prof.transport.empty and not prof.mpi.empty
