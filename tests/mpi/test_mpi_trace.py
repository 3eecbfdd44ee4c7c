"""Trace mode on real MPI ranks: the collective flush writes every rank's
block, clocks are aligned within the bound they state, and trace off writes
exactly the files of before (the golden file).

Failures are gathered to all ranks before any assert (``all_errors``), so no
rank waits forever in a collective.
"""
from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest
from _workload import all_errors
from helpers.golden import GOLDEN, RUN, fig2

import tinyprof
from tinyprof import annotate
from tinyprof.format import trace_section
from tinyprof.format.reader import parse_file


def _fake_clock_class():
    """tests/conftest.py's FakeClock (that conftest is not this suite's)."""
    spec = importlib.util.spec_from_file_location(
        "tinyprof_tests_conftest", os.path.join(os.path.dirname(GOLDEN), "..", "conftest.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FakeClock


FakeClock = _fake_clock_class()

pytestmark = [pytest.mark.mpi]
impl = annotate.impl


def blocks_of(outdir) -> list:
    """Every file's trace blocks, in file order."""
    out = []
    for name in sorted(os.listdir(outdir)):
        f = parse_file(os.path.join(outdir, name))
        h = f.header
        if "trace" in f.sections:
            out += trace_section.parse(f.sections["trace"], name, f.section_lines["trace"],
                                       len(f.parents), h.first_rank, h.rank_count, h.nranks)
    return out


@pytest.mark.parametrize("trace", [False, True])
def test_trace_off_files_equal_the_golden_file(world, mpi_tmp_path, monkeypatch, trace):
    """The golden program on 2 ranks through a real Profiler and flush: trace off
    gives the golden bytes; trace on gives them plus the trace section."""
    if world.Get_size() != 2:
        pytest.skip("the golden file holds 2 ranks")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    monkeypatch.setenv("TINYPROF_RUN_ID", RUN)
    monkeypatch.setenv("TINYPROF_AUTO_METADATA", "0")     # the golden file has no run metadata
    outdir = str(mpi_tmp_path / f"golden-{trace}")
    clock = FakeClock()
    impl.reset()
    impl.set_clock(clock)
    errors = []
    try:
        tinyprof.Profiler("fig2", 0, "tag:0,mem:1", outdir=outdir, aggregators=1, trace=trace)
        for x in range(2):
            fig2(world.rank, x, clock)
        tinyprof.flush()
        if world.rank == 0:
            path = os.path.join(outdir, "fig2.0-of-1.tp")
            data = open(path, "rb").read()
            golden = open(GOLDEN, "rb").read()
            if not trace and data != golden:
                errors.append("trace off: the file differs from the golden file")
            if trace:
                at = data.index(b"section trace ")
                if data[:at] != golden[:golden.index(b"end ")]:
                    errors.append("trace on: the file does not start with the golden lines")
                blocks = blocks_of(outdir)
                if [b.rank for b in blocks] != [0, 1] or \
                        [len(b.events) for b in blocks] != [2 * 7, 2 * 8]:
                    errors.append(f"blocks: {[(b.rank, len(b.events)) for b in blocks]}")
    finally:
        impl.set_clock(None)
        tinyprof.Profiler("after", outdir=str(mpi_tmp_path / "after"))   # trace off again
        impl.reset()
    assert all_errors(world, errors) == []


def test_every_rank_has_a_block_and_aligned_clocks(world, mpi_tmp_path):
    """All ranks share one machine's CLOCK_MONOTONIC, so the true offsets are 0
    and Cristian's bound is exact: |offset| <= error, at both alignments."""
    outdir = str(mpi_tmp_path / "aligned")
    impl.reset()
    errors = []
    try:
        tinyprof.Profiler("al", outdir=outdir, aggregators=max(1, world.Get_size() // 2),
                          trace=True)
        for _ in range(world.rank + 1):
            with tinyprof.Event("main"):
                with tinyprof.Event("inner"):
                    pass
        tinyprof.flush()
        if world.rank == 0:
            blocks = blocks_of(outdir)
            if [b.rank for b in blocks] != list(range(world.Get_size())):
                errors.append(f"ranks {[b.rank for b in blocks]}")
            for b in blocks:
                l0, o0, l1, o1, err = b.clock
                if len(b.events) != 2 * (b.rank + 1):
                    errors.append(f"rank {b.rank}: {len(b.events)} events")
                if b.rank == 0 and (o0, o1, err) != (0, 0, 0):
                    errors.append(f"rank 0's clock {b.clock}")
                if not (abs(o0) <= err and abs(o1) <= err and l0 <= l1):
                    errors.append(f"rank {b.rank}: clock {b.clock} outside its bound")
                starts = b.events[:, 2]
                if not (np.all(np.diff(starts) >= 0) and l0 <= starts[0] <= l1):
                    errors.append(f"rank {b.rank}: starts {starts} not within the run")
    finally:
        tinyprof.Profiler("after", outdir=str(mpi_tmp_path / "after2"))
        impl.reset()
    assert all_errors(world, errors) == []


def test_mpi_calls_are_traced_with_their_messages(world, mpi_tmp_path):
    """A ring Sendrecv, Isend + Irecv + Waitall, an Irecv from any source
    completed by Wait, an Allreduce and a Bcast from the last rank, each in
    its own event: every call row, with its op, communicator, bytes, root and
    endpoints (actual source and tag from the status), exactly."""
    from mpi4py import MPI
    size, rank = world.Get_size(), world.rank
    right, left = (rank + 1) % size, (rank - 1) % size
    outdir = str(mpi_tmp_path / "calls")
    impl.reset()
    prof = tinyprof.Profiler("calls", outdir=outdir, mpi=True, trace=True)
    prof.session.capture.reset()
    errors = []
    buf, got = np.arange(4.0), np.zeros(4)
    with tinyprof.Event("ring"):
        world.Sendrecv(buf, dest=right, sendtag=3, recvbuf=got, source=left, recvtag=3)
    with tinyprof.Event("nonblocking"):
        reqs = [world.Irecv(got, source=left, tag=4), world.Isend(buf[:2], dest=right, tag=4)]
        MPI.Request.Waitall(reqs)
    with tinyprof.Event("any"):
        req = world.Irecv(got, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG)
        world.Send(buf[:1], dest=right, tag=10 + rank)
        req.Wait()
    with tinyprof.Event("collective"):
        world.Allreduce(MPI.IN_PLACE, buf)
        world.Bcast(buf, root=size - 1)
    tinyprof.flush()
    tinyprof.Profiler("after", outdir=str(mpi_tmp_path / "after3"))      # trace and capture off
    impl.reset()
    if rank == 0:
        lines = {p[-1]: i for i, p in enumerate(parse_file(
            os.path.join(outdir, sorted(os.listdir(outdir))[0])).paths)}
        for b in blocks_of(outdir):
            r = b.rank
            rows = [(b.ops[op], b.comms[comm] if comm >= 0 else "", line, nbytes, root,
                     sorted(tuple(e[1:]) for e in b.endpoints[b.endpoints[:, 0] == i].tolist()))
                    for i, (_, line, _, _, op, comm, nbytes, root) in enumerate(b.calls.tolist())]
            R, L = (r + 1) % size, (r - 1) % size
            W = b.comms.index("COMM_WORLD")         # endpoints name their communicator
            expect = [
                ("Sendrecv", "COMM_WORLD", lines["ring"], 32, -1,
                 sorted([(0, R, 3, 32, W), (1, L, 3, 32, W)])),
                ("Irecv", "COMM_WORLD", lines["nonblocking"], 32, -1, []),
                ("Isend", "COMM_WORLD", lines["nonblocking"], 16, -1, [(0, R, 4, 16, W)]),
                ("Waitall", "", lines["nonblocking"], 0, -1, [(1, L, 4, 16, W)]),
                ("Irecv", "COMM_WORLD", lines["any"], 32, -1, []),
                ("Send", "COMM_WORLD", lines["any"], 8, -1, [(0, R, 10 + r, 8, W)]),
                ("Wait", "", lines["any"], 0, -1, [(1, L, 10 + L, 8, W)]),
                ("Allreduce", "COMM_WORLD", lines["collective"], 32, -1, []),
                ("Bcast", "COMM_WORLD", lines["collective"], 32, size - 1, [])]
            if rows != expect:
                errors.append(f"rank {r}: calls {rows}")
            ev = {int(line): (s, s + d) for _, line, s, d in b.events.tolist()}
            for _, line, start, dur, *_ in b.calls.tolist():
                lo, hi = ev[line]
                if not lo <= start <= start + dur <= hi:
                    errors.append(f"rank {r}: a call at {start}+{dur} outside its event {lo}..{hi}")
    assert all_errors(world, errors) == []
