"""libtinyprof_mpi under mpi4py: loaded with ctypes after ``from mpi4py
import MPI`` and patched into mpi4py's extension (tinyprof_mpi_patch), so
mpi4py's large-count ``_c`` calls are seen. Exact calls, bytes, buckets,
peer matrix, communicator names and members, pause, threads.

Every test computes its errors on each rank and gathers them (with
recording off) before asserting, so that no rank waits in a collective.
"""
from __future__ import annotations

import ctypes
import pickle
import re
import threading
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import pytest
from mpi4py import MPI

import tinyprof

pytestmark = pytest.mark.mpi

LIB = Path(tinyprof.__file__).parent / "libtinyprof_mpi.so"
OPS, PEERS = 7, 5            # TP_OP_FIELDS, TP_PEER_FIELDS
PRIVATE, FREED = 2, 4        # TP_COMM_PRIVATE, TP_COMM_FREED


class Lib:
    """The library through ctypes, with the reads the tests need."""

    def __init__(self) -> None:
        lib = self.lib = ctypes.CDLL(str(LIB))
        lib.tinyprof_mpi_ops.restype = lib.tinyprof_mpi_peers.restype = ctypes.POINTER(ctypes.c_int64)
        lib.tinyprof_mpi_op_name.restype = ctypes.c_char_p
        lib.tinyprof_mpi_set_source.argtypes = [ctypes.c_void_p]
        lib.tinyprof_mpi_patch.argtypes = [ctypes.c_char_p]
        self.patched = lib.tinyprof_mpi_patch(b"mpi4py/MPI")

    def rows(self, peers: bool = False) -> List[Tuple[int, ...]]:
        n = ctypes.c_size_t()
        fields = PEERS if peers else OPS
        p = (self.lib.tinyprof_mpi_peers if peers else self.lib.tinyprof_mpi_ops)(ctypes.byref(n))
        rows = [tuple(p[i * fields + j] for j in range(fields)) for i in range(n.value)]
        self.lib.tinyprof_mpi_free(p)
        return rows

    def comm(self, i: int) -> Tuple[str, int, List[int], int]:
        """(name, size, members, flags) of record i."""
        name, info = ctypes.create_string_buffer(256), (ctypes.c_int64 * 4)()
        assert self.lib.tinyprof_mpi_comm_info(i, name, 256, info) == 0
        out = (ctypes.c_int32 * max(1, info[1]))()
        n = self.lib.tinyprof_mpi_comm_members(i, out, info[1])
        return name.value.decode(), info[0], list(out)[:n], info[3]

    def ops(self) -> Dict[Tuple[str, str, int], Tuple[int, int]]:
        """{(comm name, op, bucket): (calls, bytes)} over all nodes (node 0 here)."""
        got = {}
        for node, comm, op, bucket, calls, nbytes, time in self.rows():
            assert node == 0 and time >= 0
            key = (self.comm(comm)[0] if comm >= 0 else "-", self.lib.tinyprof_mpi_op_name(op).decode(), bucket)
            assert key not in got
            got[key] = (calls, nbytes)
        return got

    def names(self) -> Dict[str, int]:
        return {self.comm(i)[0]: i for i in range(self.lib.tinyprof_mpi_comm_count())}


@pytest.fixture(scope="module")
def tp() -> Lib:
    assert LIB.exists(), f"{LIB} not built (setup.py build_ext --inplace)"
    return Lib()


@pytest.fixture
def rec(tp, world):
    """Recording on, from zero, charged to node 0; off again after."""
    tp.lib.tinyprof_mpi_set_source(None)
    tp.lib.tinyprof_mpi_reset()
    tp.lib.tinyprof_mpi_enable(1)
    yield tp
    tp.lib.tinyprof_mpi_enable(0)


def check_all(tp: Lib, world, errors: List[str]) -> None:
    """Assert no rank has errors (gathered with recording off)."""
    tp.lib.tinyprof_mpi_enable(0)
    every = world.allgather(errors)
    assert not any(every), every


def expect(errors: List[str], what: str, got, want) -> None:
    if got != want:
        errors.append(f"rank {MPI.COMM_WORLD.rank}: {what}: got {got!r}, want {want!r}")


def test_patched(tp):
    assert tp.lib.tinyprof_mpi_abi() == 3
    assert tp.patched > 0 or tp.lib.tinyprof_mpi_patch(b"mpi4py/MPI") == 0   # already ours
    assert tp.lib.tinyprof_mpi_patch(b"no-such-object") == -1


def test_mpi4py_calls_exact(rec, world):
    """Sendrecv, Allreduce, Isend+Irecv+Waitall and lowercase isend/recv (the
    `_c` entry points, Mprobe + Mrecv) on a ring: exact ops and matrix."""
    P, r = world.size, world.rank
    right, left = (r + 1) % P, (r - 1) % P
    a, b = np.arange(10, dtype=np.float64), np.empty(10)
    world.Sendrecv(a, right, recvbuf=b, source=left)
    world.Allreduce(a[:3], b[:3])
    ia, ib = np.arange(5, dtype=np.int32), np.empty(5, dtype=np.int32)
    MPI.Request.Waitall([world.Isend(ia, right), world.Irecv(ib, left)])
    obj = b"x" * 100
    req = world.isend(obj, right)     # a blocking send to itself would hang on 1 rank
    world.recv(source=left)
    req.wait()
    rec.lib.tinyprof_mpi_enable(0)
    L = len(pickle.dumps(obj, MPI.pickle.PROTOCOL))
    w = "COMM_WORLD"
    errors: List[str] = []
    expect(errors, "ops", rec.ops(), {
        (w, "Sendrecv", 7): (1, 80), (w, "Allreduce", 5): (1, 24),
        (w, "Isend", 5): (1, 20), (w, "Irecv", 5): (1, 20), ("-", "Waitall", 0): (1, 0),
        (w, "Isend", L.bit_length()): (1, L), ("-", "Wait", 0): (1, 0), (w, "Mprobe", 0): (1, 0),
        (w, "Mrecv", L.bit_length()): (1, L)})
    mine = [(peer, msgs, nbytes) for node, comm, peer, msgs, nbytes in rec.rows(peers=True)
            if rec.comm(comm)[0] == w]
    matrix = np.zeros((P, P), dtype=np.int64)
    for src, rows in enumerate(world.allgather(mine)):
        for peer, msgs, nbytes in rows:
            expect(errors, "messages", msgs, 3)
            matrix[src, peer] += nbytes
    want = np.zeros((P, P), dtype=np.int64)
    for i in range(P):
        want[i, (i + 1) % P] = 80 + 20 + L
    expect(errors, "matrix", matrix.tolist(), want.tolist())
    check_all(rec, world, errors)


def test_split_and_dup_names(rec, world):
    """Names from a split (key reverses the order) and a dup: agreed across
    the members, sizes and members exact, FREED after Free."""
    P, r = world.size, world.rank
    errors: List[str] = []
    s1 = world.Split(r % 2, -r)
    s2 = world.Split(r % 3, -r)
    d = s1.Dup()
    s1.Barrier()
    d.Allreduce(np.ones(2), np.empty(2))
    ops = rec.ops()
    rec.lib.tinyprof_mpi_enable(0)
    color1 = sorted((q for q in range(P) if q % 2 == r % 2), reverse=True)
    color2 = sorted((q for q in range(P) if q % 3 == r % 3), reverse=True)
    names = rec.names()
    n1, n2 = sorted((n for n in names if re.fullmatch(r"COMM_WORLD\.split\d+(@\d+)?", n)), key=names.get)[-2:]
    k = int(n1.split("@")[0][len("COMM_WORLD.split"):])
    expect(errors, "split names", (n1, n2), (
        f"COMM_WORLD.split{k}" + (f"@{color1[0]}" if len(color1) < P else ""),
        f"COMM_WORLD.split{k + 1}" + (f"@{color2[0]}" if len(color2) < P else "")))
    expect(errors, "split record", rec.comm(names[n1])[1:], (len(color1), color1, 0))
    expect(errors, "split record", rec.comm(names[n2])[1:], (len(color2), color2, 0))
    expect(errors, "dup record", rec.comm(names[n1 + ".dup1"])[1:], (len(color1), color1, 0))
    expect(errors, "ops", ops, {
        ("COMM_WORLD", "Comm_split", 0): (2, 0), (n1, "Comm_dup", 0): (1, 0),
        (n1, "Barrier", 0): (1, 0), (n1 + ".dup1", "Allreduce", 5): (1, 16)})
    expect(errors, "same names on all members", set(s1.allgather(n1)), {n1})
    expect(errors, "same names on all members", set(s2.allgather(n2)), {n2})
    d.Free()
    expect(errors, "freed", rec.comm(names[n1 + ".dup1"])[3], FREED)
    s1.Free()
    s2.Free()
    check_all(rec, world, errors)


def test_pause_hides_traffic_and_communicators(rec, world):
    errors: List[str] = []
    start = rec.lib.tinyprof_mpi_comm_count()
    before = world.Dup()
    rec.lib.tinyprof_mpi_pause(1)
    world.Allreduce(np.ones(1), np.empty(1))
    mine = world.Dup()
    expect(errors, "depth", rec.lib.tinyprof_mpi_pause(0), 0)
    mine.Allreduce(np.ones(4), np.empty(4))     # private: not counted, paused or not
    mine.Free()
    after = world.Dup()
    made = [rec.comm(i) for i in range(start, rec.lib.tinyprof_mpi_comm_count())]
    expect(errors, "records", [c[3] for c in made], [0, PRIVATE | FREED, 0])
    k = int(made[0][0][len("COMM_WORLD.dup"):])
    expect(errors, "a private dup does not count", (made[0][0], made[2][0]),
           (f"COMM_WORLD.dup{k}", f"COMM_WORLD.dup{k + 1}"))
    expect(errors, "ops", rec.ops(), {("COMM_WORLD", "Comm_dup", 0): (2, 0)})
    before.Free()
    after.Free()
    check_all(rec, world, errors)


def test_threads_sum_exactly(rec, world):
    """Two threads, each N Allreduce on its own dup'd communicator, while the
    main thread reads the tables: the sums are exact."""
    if MPI.Query_thread() != MPI.THREAD_MULTIPLE:
        pytest.skip("MPI_THREAD_MULTIPLE not provided")
    N = 200
    comms = [world.Dup(), world.Dup()]
    names = rec.names()
    dup_names = sorted((n for n in names if n.startswith("COMM_WORLD.dup")), key=names.get)[-2:]

    def work(c):
        x, y = np.ones(1), np.empty(1)
        for _ in range(N):
            c.Allreduce(x, y)

    threads = [threading.Thread(target=work, args=(c,)) for c in comms]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        rec.rows()                               # collecting while they record
    for t in threads:
        t.join()
    errors: List[str] = []
    expect(errors, "ops", rec.ops(), {("COMM_WORLD", "Comm_dup", 0): (2, 0),
                                      (dup_names[0], "Allreduce", 4): (N, 8 * N),
                                      (dup_names[1], "Allreduce", 4): (N, 8 * N)})
    for c in comms:
        c.Free()
    check_all(rec, world, errors)


def test_off_and_reset(tp, world):
    tp.lib.tinyprof_mpi_reset()
    world.Allreduce(np.ones(1), np.empty(1))     # recording off
    errors: List[str] = []
    expect(errors, "off", tp.rows(), [])
    tp.lib.tinyprof_mpi_enable(1)
    world.Barrier()
    tp.lib.tinyprof_mpi_enable(0)
    expect(errors, "on", len(tp.rows()), 1)
    tp.lib.tinyprof_mpi_reset()
    expect(errors, "reset", (tp.rows(), tp.rows(peers=True)), ([], []))
    check_all(tp, world, errors)
