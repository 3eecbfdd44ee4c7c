"""libtinyprof_mpi linked into a C program (``-ltinyprof_mpi`` before
``-lmpi``): exact calls, bytes, buckets, peers and communicator records of
tests/native/interposer.c at several rank counts."""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
from helpers.native import MPICC, ROOT, require_mpicc, run

import tinyprof

LIB = Path(tinyprof.__file__).parent / "libtinyprof_mpi.so"


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    require_mpicc()
    assert LIB.exists(), f"{LIB} not built (setup.py build_ext --inplace)"
    exe = tmp_path_factory.mktemp("mpi-capture") / "interposer"
    cmd = [str(MPICC), "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-I", str(ROOT / "native" / "include"),
           str(ROOT / "tests" / "native" / "interposer.c"), f"-L{LIB.parent}", "-ltinyprof_mpi",
           f"-Wl,-rpath,{LIB.parent}", "-o", str(exe)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    assert result.returncode == 0, f"{' '.join(cmd)}\n{result.stderr}"
    return exe


def bucket(b: int) -> int:
    return b.bit_length()


def parse(path: Path) -> Tuple[List[List[str]], Dict[tuple, Tuple[int, int]], Dict[tuple, Tuple[int, int]]]:
    """(comm rows, ops {(node, comm name, op, bucket): (calls, bytes)},
    peers {(node, comm name, peer): (messages, bytes)})."""
    comms, ops, peers = [], {}, {}
    for line in path.read_text().splitlines():
        kind, *f = line.split("|")
        if kind == "comm":
            comms.append(f)
        name = (lambda i: "-" if i == -1 else comms[i][1])
        if kind == "op":
            key = (int(f[0]), name(int(f[1])), f[2], int(f[3]))
            assert key not in ops
            ops[key] = (int(f[4]), int(f[5]))
        elif kind == "peer":
            peers[(int(f[0]), name(int(f[1])), int(f[2]))] = (int(f[3]), int(f[4]))
    return comms, ops, peers


@pytest.mark.parametrize("nranks", [1, 2, 3, 5])
def test_linked_program(program, tmp_path, nranks):
    run([program, tmp_path], nranks)
    for r in range(nranks):
        comms, ops, peers = parse(tmp_path / f"rank{r}.txt")
        color = [q for q in range(nranks) if q % 2 == r % 2]
        sub = "COMM_WORLD.split1" + (f"@{color[0]}" if len(color) < nranks else "")
        members = ",".join(map(str, color))
        world = ",".join(map(str, range(nranks)))
        assert [c[:5] + [c[6]] for c in comms[:4]] == [
            ["0", "COMM_WORLD", str(nranks), str(nranks), "0", world],
            ["1", "COMM_SELF", "1", "0", "0", ""],
            ["2", sub, str(len(color)), str(len(color)), "1", members],
            ["3", sub + ".dup1", str(len(color)), str(len(color)), "1", members]]
        assert [c[5] for c in comms] == ["0", "1", "0", "4", "6"]   # dup FREED; ours PRIVATE|FREED
        assert len(comms) == 5
        w = "COMM_WORLD"
        assert ops == {
            (1, w, "Isend", bucket(40)): (1, 40),
            (1, w, "Recv", bucket(40)): (1, 40),
            (1, "-", "Wait", 0): (1, 0),
            (1, w, "Send", bucket(12)): (1, 12),
            (1, w, "Allreduce", bucket(24)): (1, 24),
            (1, w, "Comm_split", 0): (1, 0),
            (1, sub, "Comm_dup", 0): (1, 0),
            (1, sub + ".dup1", "Bcast", bucket(20)): (1, 20),
            (1, w, "Alltoall", bucket(4 * nranks)): (1, 4 * nranks),
            (1, w, "Gatherv", bucket(4 * (r + 1))): (1, 4 * (r + 1)),
            (2, w, "Barrier", 0): (1, 0),
            (2, sub + ".dup1", "Comm_free", 0): (1, 0),
        }
        assert peers == {(1, w, (r + 1) % nranks): (1, 40)}
