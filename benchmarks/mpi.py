"""The cost of MPI capture (``Profiler(mpi=True)``, docs/mpi.md).

    .venv/bin/python benchmarks/mpi.py [--repeats 5] [--blocks 200] [--calls 2000] [--steps 2000]
    .venv/bin/python benchmarks/mpi.py --ucx [--repeats 7] [--blocks 200] [--calls 2000]

1. Per MPI call: a worker (mpiexec, 1 rank on COMM_SELF, then 2 ranks on
   COMM_WORLD, a neighbour exchange) starts ``Profiler(mpi=True)`` and times
   ``--blocks`` pairs of blocks of ``--calls`` small calls from mpi4py,
   recording off, on, then on with trace mode (``tinyprof_mpi_trace``, the
   trace emptied before each block), side by side in one process:
   ``Allreduce`` of one double and ``Sendrecv`` of 8 bytes. A triple gives
   on - off and traced - on per call; the table gives the medians. "Off" has the
   library in mpi4py's path with recording off (its wrappers then cost one
   branch: ~3 ns in a C program, see docs/performance.md).
2. Event enter+exit (``with Event("x"): pass``), nested in an open event,
   the same way: capture adds no work to events, so on - off is noise.
3. The demo (tinyprof/demo.py, ``--steps``) on 4 ranks with
   ``TINYPROF_MPI=0`` and ``=1``, interleaved, ``--repeats`` runs each: its
   own time figure (Profiler() to the end of the flush, slowest rank), median.

``--ucx`` measures instead what the transport view (``ucx=True``) adds per
MPI call over ``mpi=True`` alone: 2 ranks under ``MPIR_CVAR_NOLOCAL=1`` (else
MPICH does not take UCX between ranks of one node) play ping-pong with
``Send``/``Recv`` of 8 bytes (one UCP operation per call: ``tag_send`` or
``tag_recv``) inside an Event, in blocks of ``--calls`` MPI calls per rank.
Each of ``--repeats`` rounds launches a worker with
``Profiler(mpi=True, ucx=False)`` and one with ``ucx=True``, the order
swapped every round; the latter alternates ``--blocks`` pairs of blocks
with its UCP hooks off (what ``ucx=False`` runs: libmpi calls libucp
directly) and on. The table gives
medians over the rounds of each worker's median block: across the two
processes, and within the ``ucx=True`` one (on - off per pair, the finer
figure). Each ``ucx=True`` run must have recorded one UCP operation per
timed MPI call with the hooks on (``tinyprof.read(outdir).transport``, every
rank ``used``), each ``ucx=False`` run none, or the script fails.

Prints Markdown tables (docs/performance.md, "MPI capture").
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from continuous import MPIEXEC, run_demo

CASES = ("Allreduce", "Sendrecv", "Event")
UCX_GOAL = 150.0                    # ns added per MPI call by ucx=True (the goal)


def worker(blocks: int, calls: int) -> None:
    """Time the cases on this rank, recording off, on and traced by turns;
    rank 0 prints one JSON line: per case, (median off ns/call, median of
    on - off, median of traced - on)."""
    import numpy as np
    from mpi4py import MPI

    import tinyprof
    comm = MPI.COMM_WORLD
    lib = tinyprof.Profiler("bench", outdir=tempfile.mkdtemp(), mpi=True).session.capture.lib
    over = MPI.COMM_SELF if comm.Get_size() == 1 else comm
    right, left = (over.Get_rank() + 1) % over.Get_size(), (over.Get_rank() - 1) % over.Get_size()
    x, y = np.ones(1), np.ones(1)
    ev = tinyprof.Event("x")

    def block(case: str) -> float:
        t = time.perf_counter_ns()
        if case == "Allreduce":
            for _ in range(calls):
                over.Allreduce(x, y)
        elif case == "Sendrecv":
            for _ in range(calls):
                over.Sendrecv(x, dest=right, recvbuf=y, source=left)
        else:
            for _ in range(calls):
                with ev:
                    pass
        return (time.perf_counter_ns() - t) / calls

    out: Dict[str, List[float]] = {}
    with tinyprof.Event("bench"):
        for case in CASES:
            offs, diffs, traced = [], [], []
            for _ in range(blocks):
                lib.tinyprof_mpi_enable(0)
                off = block(case)
                lib.tinyprof_mpi_enable(1)
                on = block(case)
                lib.tinyprof_mpi_reset()
                lib.tinyprof_mpi_trace(calls)
                traced.append(block(case) - on)
                lib.tinyprof_mpi_trace(0)
                diffs.append(on - off)
                offs.append(off)
            out[case] = [statistics.median(offs), statistics.median(diffs),
                         statistics.median(traced)]
    lib.tinyprof_mpi_enable(0)
    if comm.Get_rank() == 0:
        print(json.dumps(out), flush=True)


def per_call(blocks: int, calls: int) -> None:
    print("| ranks | call | off (ns) | added by recording (ns) | added by trace mode (ns) |")
    print("| ---: | --- | ---: | ---: | ---: |")
    for ranks in (1, 2):
        proc = subprocess.run([MPIEXEC, "-n", str(ranks), sys.executable, os.path.abspath(__file__),
                               "--worker", "--blocks", str(blocks), "--calls", str(calls)],
                              capture_output=True, text=True, timeout=1200)
        if proc.returncode:
            raise SystemExit(f"worker failed:\n{proc.stdout}{proc.stderr}")
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        for case in CASES:
            off, added, traced = got[case]
            label = "Event enter+exit" if case == "Event" else case
            print(f"| {ranks} | {label} | {off:.0f} | {added:+.1f} | {traced:+.1f} |")


def ucx_worker(ucx: bool, blocks: int, calls: int, outdir: str) -> None:
    """Ping-pong of 8 bytes between 2 ranks under ``Profiler(mpi=True,
    ucx=ucx)``, in blocks of ``calls`` MPI calls per rank; with ``ucx``,
    blocks alternate UCP hooks off and on. Rank 0 prints one JSON line:
    median ns per MPI call of the blocks with the hooks off and on, the
    median of on - off per pair, and the MPI calls made with the hooks on."""
    import numpy as np
    from mpi4py import MPI

    import tinyprof
    comm = MPI.COMM_WORLD
    if comm.Get_size() != 2:
        raise SystemExit("the ucx worker needs 2 ranks")
    prof = tinyprof.Profiler("bench", outdir=outdir, mpi=True, ucx=ucx)
    lib = prof.session.capture.lib
    rank, buf = comm.Get_rank(), np.ones(1)     # 8 bytes
    other = 1 - rank

    def block() -> float:
        t = time.perf_counter_ns()
        if rank == 0:
            for _ in range(calls // 2):
                comm.Send(buf, dest=other)
                comm.Recv(buf, source=other)
        else:
            for _ in range(calls // 2):
                comm.Recv(buf, source=other)
                comm.Send(buf, dest=other)
        return (time.perf_counter_ns() - t) / (calls // 2 * 2)

    offs, ons, diffs = [], [], []
    with tinyprof.Event("pingpong"):
        block()                 # warm-up: endpoints, UCX's protocol tables read once
        for _ in range(blocks):
            if ucx:
                lib.tinyprof_ucx_enable(0)
                off = block()
                lib.tinyprof_ucx_enable(1)
                on = block()
                offs.append(off)
                ons.append(on)
                diffs.append(on - off)
            else:
                offs.append(block())
    hooked = (1 + blocks) * (calls // 2 * 2) if ucx else 0
    prof.flush()
    prof.close()
    if rank == 0:
        med = [statistics.median(v) if v else None for v in (offs, ons, diffs)]
        print(json.dumps({"off": med[0], "on": med[1], "added": med[2], "hooked": hooked}), flush=True)


def ucx_check(outdir: str, ucx: bool, hooked: int) -> None:
    """Fail unless the run recorded the transport view as it should have:
    with ``ucx``, one UCP operation per MPI call made with the hooks on,
    on both ranks; without, nothing."""
    import tinyprof
    prof = tinyprof.read(outdir)
    tr = prof.transport
    if not ucx:
        if len(tr) or prof.ucx:
            raise SystemExit(f"ucx=False recorded a transport view ({outdir}):\n{tr}")
        return
    if prof.ucx != {0: "used", 1: "used"}:
        raise SystemExit(f"ucx=True: the transport view was not used on both ranks: {prof.ucx}; "
                         f"is MPIR_CVAR_NOLOCAL=1 set, does this MPI use UCX? ({outdir})")
    mine = tr[tr.callpath == ("pingpong",)]
    per_rank = mine.groupby("rank").calls.sum().to_dict()
    if per_rank != {0: hooked, 1: hooked} or set(mine.ucp_op) != {"tag_send", "tag_recv"}:
        raise SystemExit(f"ucx=True: expected {hooked} UCP operations (tag_send, tag_recv) per rank "
                         f"under pingpong, got {per_rank}:\n{tr}")


def ucx_added(repeats: int, blocks: int, calls: int) -> None:
    """The ucx=False and ucx=True workers by turns, ``repeats`` rounds."""
    env = dict(os.environ, MPIR_CVAR_NOLOCAL="1")
    env.pop("TINYPROF_UCX", None)
    runs: Dict[bool, List[dict]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(repeats):
            for ucx in (False, True) if r % 2 == 0 else (True, False):     # neither always first
                outdir = os.path.join(tmp, f"{r}-{ucx}")
                proc = subprocess.run([MPIEXEC, "-n", "2", sys.executable, os.path.abspath(__file__),
                                       "--ucx-worker", str(int(ucx)), outdir,
                                       "--blocks", str(blocks), "--calls", str(calls)],
                                      capture_output=True, text=True, timeout=1200, env=env)
                if proc.returncode:
                    raise SystemExit(f"ucx worker failed:\n{proc.stdout}{proc.stderr}")
                got = json.loads(proc.stdout.strip().splitlines()[-1])
                ucx_check(outdir, ucx, got["hooked"])
                runs[ucx].append(got)

    def row(label: str, off: List[float], on: List[float], added: List[float]) -> None:
        print(f"| {label} | {statistics.median(off):.0f} | {statistics.median(on):.0f} "
              f"| {statistics.median(added):+.1f} | {min(added):+.1f} to {max(added):+.1f} |")

    print(f"| 2 ranks, Send/Recv ping-pong of 8 B, median of {repeats} rounds | mpi=True (ns/call) "
          f"| ucx=True (ns/call) | added (ns/call) | added, range over rounds |")
    print("| --- | ---: | ---: | ---: | ---: |")
    off = [g["off"] for g in runs[False]]
    on = [g["on"] for g in runs[True]]
    row("separate processes, by turns", off, on, [b - a for a, b in zip(off, on)])
    row("in the ucx=True process, UCP hooks off/on by blocks",
        [g["off"] for g in runs[True]], on, [g["added"] for g in runs[True]])
    print(f"\nGoal: at most {UCX_GOAL:.0f} ns added per MPI call.")


def demo(repeats: int, steps: int) -> None:
    times: Dict[str, List[float]] = {"0": [], "1": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):
            for flag in times:
                env = {"TINYPROF_MPI": flag}
                times[flag].append(run_demo(4, steps, 0, env, os.path.join(tmp, flag), 256)[0])
    off, on = statistics.median(times["0"]), statistics.median(times["1"])
    print("\n| demo, 4 ranks | capture off (s) | capture on (s) | on / off |")
    print("| --- | ---: | ---: | ---: |")
    print(f"| {steps} steps, median of {repeats} | {off:.3f} | {on:.3f} | {on / off:.3f} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--blocks", type=int, default=200)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--no-demo", action="store_true", help="per-call figures only")
    p.add_argument("--ucx", action="store_true",
                   help="only what the transport view (ucx=True) adds per MPI call over mpi=True")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--ucx-worker", nargs=2, metavar=("UCX", "OUTDIR"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args.blocks, args.calls)
        return
    if args.ucx_worker:
        ucx_worker(args.ucx_worker[0] == "1", args.blocks, args.calls, args.ucx_worker[1])
        return
    if args.ucx:
        ucx_added(args.repeats, args.blocks, args.calls)
        return
    per_call(args.blocks, args.calls)
    if not args.no_demo:
        demo(args.repeats, args.steps)


if __name__ == "__main__":
    main()
