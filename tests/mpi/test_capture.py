"""MPI communication per callpath, recorded from mpi4py on real ranks
(``Profiler(mpi=True)``): exact calls, bytes, buckets, communicator names
and members, and the exact communication matrix, against what each test
computes itself; tinyprof's own traffic never shows.

Errors are gathered to all ranks before any assert (see _workload.all_errors).
"""
from __future__ import annotations

import asyncio
import os
import re
import threading
from typing import Dict, List, Tuple

import numpy as np
import pytest
from _workload import all_errors
from mpi4py import MPI

import tinyprof
from tinyprof.runtime import capture

pytestmark = [pytest.mark.mpi,
              pytest.mark.skipif(not os.path.exists(capture.LIBRARY),
                                 reason="libtinyprof_mpi.so not built (no mpicc at install)")]

Event = tinyprof.Event
Key = Tuple[Tuple[str, ...], int, str, str]        # callpath, rank, comm, op


def _start(name: str, outdir) -> None:
    """A fresh event map and MPI counts, and a profiler recording MPI."""
    tinyprof.annotate.impl.reset()
    prof = tinyprof.Profiler(name, outdir=outdir, mpi=True)
    assert prof.session.capture is not None, "MPI capture did not start"
    prof.session.capture.reset()


def _rows(prof) -> Dict[Key, Tuple[int, int, int]]:
    """(calls, bytes, bucket) per (callpath, rank, comm, op); one bucket each here."""
    out = {}
    for r in prof.mpi.itertuples():
        key = (r.callpath, r.rank, r.comm, r.op)
        assert key not in out, f"two size buckets for {key}"
        out[key] = (r.calls, r.bytes, r.bucket)
    return out


def _check(errors: List[str], rows, key: Key, calls: int, nbytes: int) -> None:
    got = rows.get(key)
    want = (calls, nbytes, nbytes // calls and (nbytes // calls).bit_length())
    if got != want:
        errors.append(f"{key}: got (calls, bytes, bucket) {got}, expected {want}")


def test_calls_bytes_names_and_matrix_per_callpath(world, mpi_tmp_path):
    rank, size = world.Get_rank(), world.Get_size()
    _start("cap", mpi_tmp_path)
    half = world.Split(rank % 2, rank)
    dup = world.Dup()
    right, left = (rank + 1) % size, (rank - 1) % size
    buf, out = np.full(100, rank, np.float64), np.empty(100)
    with Event("main"):
        with Event("halo"):
            for _ in range(3):
                world.Sendrecv(buf, dest=right, recvbuf=out, source=left)
            MPI.Request.Waitall([dup.Isend(buf[:10], dest=right), dup.Irecv(out[:10], source=left)])
        with Event("reduce"):
            x = np.ones(4)
            half.Allreduce(MPI.IN_PLACE, x)
            world.Bcast(x, root=0)
            world.Barrier()
        with Event("pickle"):
            request = dup.isend({"from": rank}, dest=right)
            got = dup.recv(source=left)
            request.wait()
    tinyprof.flush()
    prof = tinyprof.read(mpi_tmp_path)
    rows, comms = _rows(prof), prof.communicators.set_index("comm")
    errors = [] if got == {"from": left} else [f"pickle: got {got}"]
    # Names come from each rank's own rows: they must follow the rule on every rank.
    dups = {k[2] for k in rows if k[3] == "Isend" and k[0] == ("main", "halo")}
    m = re.fullmatch(r"COMM_WORLD\.dup([0-9]+)", min(dups))
    if len(dups) != 1 or m is None:
        errors.append(f"the dup has names {dups} across ranks")
        assert not all_errors(world, errors)
    dup_name, seq = min(dups), int(m[1]) - 1         # the split came just before the dup
    for r in range(size):
        members = [q for q in range(size) if q % 2 == r % 2]
        part = f"COMM_WORLD.split{seq}" + (f"@{r % 2}" if len(members) < size else "")
        for op, calls, nbytes, comm, path in (
                ("Sendrecv", 3, 2400, "COMM_WORLD", ("main", "halo")),
                ("Isend", 1, 80, dup_name, ("main", "halo")),
                ("Irecv", 1, 80, dup_name, ("main", "halo")),
                ("Waitall", 1, 0, "", ("main", "halo")),
                ("Allreduce", 1, 32, part, ("main", "reduce")),
                ("Bcast", 1, 32, "COMM_WORLD", ("main", "reduce")),
                ("Barrier", 1, 0, "COMM_WORLD", ("main", "reduce")),
                ("Comm_split", 1, 0, "COMM_WORLD", ()),
                ("Comm_dup", 1, 0, "COMM_WORLD", ())):       # tinyprof's own Dup not counted
            _check(errors, rows, (path, r, comm, op), calls, nbytes)
        if part not in comms.index or list(comms.loc[part].world_ranks) != members:
            errors.append(f"communicator {part} missing or wrong: {prof.communicators}")
    if list(comms.loc[dup_name].world_ranks) != list(range(size)):
        errors.append(f"members of {dup_name}: {comms.loc[dup_name].world_ranks}")
    # lowercase pickle calls: isend, then recv as Mprobe + Mrecv, on the user's dup
    pickle = {k[3] for k in rows if k[0] == ("main", "pickle") and k[1] == rank and k[2] == dup_name}
    if not {"Isend", "Mprobe", "Mrecv"} <= pickle:
        errors.append(f"pickle exchange on {dup_name}: {sorted(pickle)}")
    # tinyprof's own traffic (the flush's collectives, its Split) is not there
    own = {k[3] for k in rows} & {"Allgather", "Gather", "Comm_free"}
    if own:
        errors.append(f"tinyprof's own calls recorded: {own}")
    # the matrix: Sendrecv 3 x 800 and Isend 80 bytes to the right, in "halo"
    matrix = prof.comm_matrix(callpath=("main", "halo"))
    expected = np.zeros((size, size), np.int64)
    for r in range(size):
        expected[r, (r + 1) % size] += 2480
    if not (matrix == expected).all():
        errors.append(f"halo matrix {matrix.tolist()} != {expected.tolist()}")
    messages = prof.comm_matrix(callpath=("main", "halo"), comm=dup_name, metric="messages")
    if messages.sum() != size or messages[rank, right] != 1:
        errors.append(f"messages on {dup_name}: {messages.tolist()}")
    half.Free()
    dup.Free()
    assert not all_errors(world, errors)


def test_communicator_members_are_world_ranks(world, mpi_tmp_path):
    """Members translated from each communicator's group (issue 46: with aliased
    in/out arrays, which MPI forbids, Intel MPI gave 0 or MPI_UNDEFINED)."""
    rank, size = world.Get_rank(), world.Get_size()
    _start("members", mpi_tmp_path)
    backwards = world.Split(0, size - 1 - rank)
    with Event("main"):
        world.Barrier()
        backwards.Barrier()
    tinyprof.flush()
    prof = tinyprof.read(mpi_tmp_path)
    comms = prof.communicators.set_index("comm")
    split = sorted(set(prof.mpi[prof.mpi.op == "Barrier"].comm) - {"COMM_WORLD"})
    want = {"COMM_WORLD": list(range(size)), ",".join(split): list(range(size))[::-1]}
    got = {name: list(comms.loc[name].world_ranks) if name in comms.index else None for name in want}
    errors = [] if got == want else [f"members {got}, expected {want}"]
    backwards.Free()
    assert not all_errors(world, errors)


def test_threads_record_into_their_own_callpaths(world, mpi_tmp_path):
    """mpi4py asks for MPI_THREAD_MULTIPLE: each thread's calls go to its callpath."""
    if MPI.Query_thread() != MPI.THREAD_MULTIPLE:
        pytest.skip("MPI not initialised with MPI_THREAD_MULTIPLE")
    _start("thr", mpi_tmp_path)
    comms = [world.Dup() for _ in range(2)]
    counts = (5, 9)

    def work(i: int) -> None:
        with Event(f"worker{i}"):
            for _ in range(counts[i]):
                comms[i].Allreduce(MPI.IN_PLACE, np.ones(2, np.int32))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    tinyprof.flush()
    rows = _rows(tinyprof.read(mpi_tmp_path))
    errors = []
    for i in range(2):
        mine = [(k, v) for k, v in rows.items() if k[0] == (f"worker{i}",) and k[1] == world.rank]
        if [(k[3], v) for k, v in mine] != [("Allreduce", (counts[i], 8 * counts[i], 4))]:
            errors.append(f"worker{i}: {mine}")
    for c in comms:
        c.Free()
    assert not all_errors(world, errors)


def test_asyncio_task_switches_charge_the_last_entered_callpath(world, mpi_tmp_path):
    """Documented (docs/mpi.md): a task switch does not change the thread's
    current callpath, so a task that enters no event is charged to the
    callpath the previous task left current until the next enter or exit."""
    _start("aio", mpi_tmp_path)
    self_comm = MPI.COMM_SELF

    async def annotated(ready: asyncio.Event) -> None:
        with Event("a"):
            ready.set()
            await asyncio.sleep(0)          # suspended inside "a"
            await asyncio.sleep(0)

    async def bare(ready: asyncio.Event) -> None:
        await ready.wait()
        self_comm.Barrier()                 # this task entered no event

    async def both() -> None:
        ready = asyncio.Event()
        await asyncio.gather(annotated(ready), bare(ready))

    asyncio.run(both())
    self_comm.Barrier()                     # after "a" exited: no event
    tinyprof.flush()
    rows = _rows(tinyprof.read(mpi_tmp_path))
    mine = {k[0]: v for k, v in rows.items() if k[1] == world.rank and k[3] == "Barrier"}
    errors = [] if mine == {("a",): (1, 0, 0), (): (1, 0, 0)} else [f"barriers: {mine}"]
    assert not all_errors(world, errors)


def test_capture_off_records_nothing(world, mpi_tmp_path):
    tinyprof.annotate.impl.reset()
    tinyprof.Profiler("off", outdir=mpi_tmp_path, mpi=False)
    with Event("main"):
        world.Barrier()
    tinyprof.flush()
    prof = tinyprof.read(mpi_tmp_path)
    errors = [] if not prof.mpi_recorded and prof.mpi.empty else ["MPI data without mpi=True"]
    assert not all_errors(world, errors)


@pytest.mark.parametrize("aggregated", [False, True])
def test_snapshots_carry_the_mpi_section(world, mpi_tmp_path, aggregated):
    """Per rank (an explicit take) and aggregated (a helper thread, 2 files):
    the snapshot's mpi rows are the application's, none of tinyprof's own."""
    _start("snap", mpi_tmp_path)
    prof = tinyprof.runtime.session.current()
    if aggregated:
        tinyprof.Profiler("snap", outdir=mpi_tmp_path, mpi=True, frequency=3600, aggregators=2)
        prof = tinyprof.runtime.session.current()
        prof.capture.reset()
    with Event("main"):
        for _ in range(4):
            world.Allreduce(MPI.IN_PLACE, np.ones(8))
        if aggregated:                      # explicit triggers: no timing involved
            ended = prof.snapshotter.snapshot(timeout=60)
        else:
            ended = prof.snapshotter.take(1)
    world.Barrier()
    snap = tinyprof.read(mpi_tmp_path, snapshot=1)
    rows = _rows(snap)
    errors = [] if ended else ["the snapshot did not end"]
    if {key[3] for key in rows} != {"Allreduce"}:
        errors.append(f"operations {sorted({key[3] for key in rows})}, expected only Allreduce")
    for r in range(world.Get_size()):
        _check(errors, rows, (("main",), r, "COMM_WORLD", "Allreduce"), 4, 256)
    assert not all_errors(world, errors)


def test_time_inside_mpi_fits_in_its_region(world, mpi_tmp_path):
    """MPI time is timed on the TSC where it is invariant and converted to ns
    when read: whatever the machine's speed, the time inside the calls of a
    region is positive and no more than the region's own time (the two clocks
    agree to far better than 1%)."""
    _start("clk", mpi_tmp_path)
    with Event("main"):
        for _ in range(200):
            MPI.COMM_SELF.Allreduce(MPI.IN_PLACE, np.ones(4))
    tinyprof.flush()
    prof = tinyprof.read(mpi_tmp_path)
    rank = world.Get_rank()
    inside = prof.mpi.query("rank == @rank and op == 'Allreduce'").time.sum()
    region = prof.series(("main",), rank)[0][0]
    errors = [] if 0 < inside <= region * 1.01 else [f"MPI {inside} s in a region of {region} s"]
    assert not all_errors(world, errors)


def test_one_sided_io_and_persistent_requests_are_counted(world, mpi_tmp_path):
    """RMA (Put, Get, Accumulate between fences), MPI-IO (write_at, read_at)
    and persistent requests (Send_init, Recv_init, Start, Startall): calls
    and bytes on the communicator of the window, file or request; data put
    into a window, and each started send, in the matrix."""
    rank, size = world.Get_rank(), world.Get_size()
    right, left = (rank + 1) % size, (rank - 1) % size
    path = str(mpi_tmp_path) + ".io"               # beside the profile: one file for all ranks
    _start("rma", mpi_tmp_path)
    with Event("main"):
        with Event("rma"):
            win = MPI.Win.Create(np.zeros(8), comm=world)
            win.Fence()
            win.Put(np.full(4, float(rank)), right)                 # 32 bytes
            win.Fence()
            got = np.empty(2)
            win.Get(got, left)                                      # 16 bytes
            win.Fence()
            win.Accumulate(np.ones(8), right, op=MPI.SUM)           # 64 bytes
            win.Fence()
            win.Free()
        with Event("io"):
            fh = MPI.File.Open(world, path, MPI.MODE_CREATE | MPI.MODE_RDWR)
            fh.Write_at(80 * rank, np.full(10, float(rank)))        # 80 bytes
            back = np.empty(10)
            fh.Read_at(80 * rank, back)                             # 80 bytes
            fh.Close()
        with Event("persistent"):
            out, into = np.full(5, rank, np.int64), np.empty(5, np.int64)
            send = world.Send_init(out, dest=right, tag=3)          # 40 bytes a start
            recv = world.Recv_init(into, source=left, tag=3)
            for _ in range(3):
                MPI.Prequest.Startall([send, recv])
                MPI.Request.Waitall([send, recv])
            for _ in range(2):
                send.Start()
                recv.Start()
                MPI.Request.Waitall([send, recv])
            send.Free()
            recv.Free()
    tinyprof.flush()
    prof = tinyprof.read(mpi_tmp_path)
    rows = _rows(prof)
    errors = [] if back.tolist() == [float(rank)] * 10 and into.tolist() == [left] * 5 else \
        [f"the program's own results: {back}, {into}"]
    expected = [("rma", "Win_create", 1, 0), ("rma", "Win_fence", 4, 0), ("rma", "Put", 1, 32),
                ("rma", "Get", 1, 16), ("rma", "Accumulate", 1, 64), ("rma", "Win_free", 1, 0),
                ("io", "File_open", 1, 0), ("io", "File_write_at", 1, 80),
                ("io", "File_read_at", 1, 80), ("io", "File_close", 1, 0),
                ("persistent", "Send_init", 1, 40), ("persistent", "Recv_init", 1, 40),
                ("persistent", "Startall", 3, 3 * 80), ("persistent", "Start", 4, 4 * 40)]
    for r in range(size):
        for where, op, calls, nbytes in expected:
            _check(errors, rows, (("main", where), r, "COMM_WORLD", op), calls, nbytes)
        _check(errors, rows, (("main", "persistent"), r, "", "Waitall"), 5, 0)
    # nothing else: no call made inside MPI (ROMIO's, the window's) counted as the program's
    made = {(k[0][1], k[3]) for k in rows if len(k[0]) == 2}
    if made != {(where, op) for where, op, _, _ in expected} | {("persistent", "Waitall")}:
        errors.append(f"calls recorded: {sorted(made)}")
    for where, nbytes in (("rma", 32 + 64), ("persistent", 5 * 40), ("io", 0)):
        matrix = prof.comm_matrix(callpath=("main", where))
        expected = np.zeros((size, size), np.int64)
        for r in range(size):
            expected[r, (r + 1) % size] += nbytes
        if not (matrix == expected).all():
            errors.append(f"{where} matrix {matrix.tolist()} != {expected.tolist()}")
    assert not all_errors(world, errors)
