"""The demo: a 2-D Jacobi heat solver over MPI (mpi4py + numpy), annotated.

    python -m tinyprof.demo --run [OUTDIR]       # mpiexec -n 8, then print the summary
    python -m tinyprof.demo --run --mpiexec-args=--oversubscribe   # options for mpiexec
    mpiexec -n 8 python -m tinyprof.demo [OUTDIR] [--steps N]   # the application alone

The plate is split into horizontal strips, one per rank; every step exchanges
halo rows with the neighbours and updates the interior. Rank ``r`` holds
``rows * (1 + r / (P - 1))`` rows, so the last rank does twice the work of the
first; only the first and the last rank hold a physical edge and run the
``boundary`` event (``is_common=False``). The profile goes to OUTDIR
(default ``demo.tinyprof``).

``--run`` shows everything tinyprof records, so that every section of the
report it leads to (``tinyprof report OUTDIR``) has data: the run is traced,
its MPI calls captured, and a snapshot is taken every ``--snapshot-every``
steps (20) and all of them kept, for the report's time series
(``--no-trace``, ``--snapshot-every 0`` leave them out). Benchmarks run the
application alone longer with ``--steps``, with periodic snapshots with
``--frequency``; the last line gives the time from ``Profiler()`` to the end
of the flush (slowest rank), and the snapshots written and the CPU time spent
in them (largest over ranks).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from typing import Any, Callable, List, Optional

import numpy as np

import tinyprof

from . import Event, annotate
from .commands import options
from .runtime import session

HOT, COLD = 100.0, 0.0
COMPUTE, COMM = 1, 2                   # values of the consistent "kind" metric
SELFKEYS = "kind:0,bytes:1"            # the demo's custom metrics


def solve(comm, steps: int, rows: int, cols: int, check_every: int = 10,
          event: Callable[..., Any] = Event,
          after_step: Optional[Callable[[int], Any]] = None) -> float:
    """Run the annotated solver on this rank of ``comm``; returns the last
    residual (largest change of a cell in one step, over all ranks).

    ``event(name, **options)`` makes each annotated region: tinyprof's
    ``Event`` by default; benchmarks/peers.py passes other profilers' regions.
    ``after_step(step)`` runs after each step (the demo's snapshots)."""
    from mpi4py import MPI

    rank, size = comm.Get_rank(), comm.Get_size()
    top, bottom = rank == 0, rank == size - 1      # holding a physical edge of the plate
    up = MPI.PROC_NULL if top else rank - 1
    down = MPI.PROC_NULL if bottom else rank + 1
    residual = np.inf
    with event("main"):
        with event("init", kind=COMPUTE):
            mine = rows + rows * rank // max(size - 1, 1)
            u = np.zeros((mine + 2, cols))        # one halo row above and below
            new = u.copy()
        for step in range(steps):
            with event("halo", loop=1, kind=COMM, bytes=2 * u[1].nbytes * (2 - top - bottom)):
                comm.Sendrecv(u[1], dest=up, recvbuf=u[-1], source=down)
                comm.Sendrecv(u[-2], dest=down, recvbuf=u[0], source=up)
            if top or bottom:
                with event("boundary", is_common=False, loop=1, kind=COMPUTE):
                    if top:
                        u[0] = HOT
                    if bottom:
                        u[-1] = COLD
            with event("stencil", loop=1, kind=COMPUTE):
                new[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
                u, new = new, u
            if step % check_every == check_every - 1:
                with event("residual", loop=2, kind=COMM):
                    local = np.abs(u[1:-1] - new[1:-1]).max()
                    residual = comm.allreduce(local, op=MPI.MAX)
            if after_step is not None:
                after_step(step)
    return float(residual)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tinyprof.demo",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("outdir", nargs="?", default="demo.tinyprof", help="profile directory")
    p.add_argument("--run", action="store_true",
                   help="launch the application under mpiexec, then read and summarise the profile")
    p.add_argument("-n", "--nranks", type=int, default=8, help="ranks for --run (default 8)")
    options.add_mpiexec_args(p)
    p.add_argument("--steps", type=int, default=200, help="solver steps (default 200)")
    p.add_argument("--rows", type=int, default=64, help="rows of the first rank (default 64)")
    p.add_argument("--cols", type=int, default=256, help="columns (default 256)")
    p.add_argument("--frequency", type=float, default=0,
                   help="snapshot interval in seconds (default 0: none)")
    p.add_argument("--keep", choices=("last", "all"), default="last",
                   help="snapshots kept (default last; --run: all)")
    p.add_argument("--snapshot-every", type=int, default=0, metavar="STEPS",
                   help="take a snapshot every STEPS steps (default 0: none; --run: 20)")
    p.add_argument("--trace", action="store_true",
                   help="trace mode (docs/trace.md; --run: on, and it also prints the critical "
                        "path and the wait states)")
    p.add_argument("--no-trace", dest="trace", action="store_false",
                   help="no trace mode (the default without --run)")
    return p


# What --run records unless told otherwise: every section of the report filled.
RUN_DEFAULTS = {"trace": True, "keep": "all", "snapshot_every": 20}


def _mpiexec() -> str:
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    found = beside if os.access(beside, os.X_OK) else shutil.which("mpiexec")
    if not found:
        sys.exit(f"tinyprof.demo: no mpiexec next to {sys.executable} or on PATH; "
                 "install MPI, e.g. pip install mpi4py mpich")
    return found


def _launch(args: argparse.Namespace) -> int:
    cmd = [_mpiexec(), *options.mpiexec_args(args.mpiexec_args), "-n", str(args.nranks),
           sys.executable, "-m", "tinyprof.demo", args.outdir,
           "--steps", str(args.steps), "--rows", str(args.rows),
           "--cols", str(args.cols), "--frequency", str(args.frequency), "--keep", args.keep,
           "--snapshot-every", str(args.snapshot_every), "--trace" if args.trace else "--no-trace"]
    # MPI capture on unless the environment says otherwise: the demo shows it too
    env = dict(os.environ, TINYPROF_MPI=os.environ.get("TINYPROF_MPI", "1"))
    status = subprocess.run(cmd, env=env).returncode
    if status:
        sys.exit(f"tinyprof.demo: {' '.join(cmd)} failed with status {status}")
    if not annotate.enabled():
        print("tinyprof.demo: profiling is off (TINYPROF=0): the solver ran, "
              "no profile was written")
        return 0
    from .views.show import summary
    profile = tinyprof.read(args.outdir)
    print(summary(profile, args.outdir))
    if profile.mpi_recorded:
        from .views import mpi_text
        print(f"\nMPI calls (tinyprof mpi {args.outdir}; docs/mpi.md):")
        print(mpi_text.table(profile, mpi_text.group(profile), limit=8))
    if args.trace:
        from .views import trace_text
        print(f"\nCritical path (tinyprof critical-path {args.outdir}; docs/trace.md):")
        print(trace_text.critical_path(profile, limit=8))
        print(f"\nWait states (tinyprof wait-states {args.outdir}):")
        print(trace_text.wait_states(profile, limit=8))
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``python -m tinyprof.demo``."""
    argv = sys.argv[1:] if argv is None else argv
    parser = _parser()
    if "--run" in argv:
        parser.set_defaults(**RUN_DEFAULTS)
    args = parser.parse_args(argv)
    if args.run:
        return _launch(args)
    try:
        from mpi4py import MPI
    except ImportError:
        sys.exit("tinyprof.demo: needs mpi4py: pip install mpi4py mpich")
    comm = MPI.COMM_WORLD
    comm.Barrier()
    start = MPI.Wtime()
    prof = tinyprof.Profiler("heat", frequency=args.frequency, selfkeys=SELFKEYS,
                             outdir=args.outdir, keep=args.keep, trace=args.trace or None)
    every = args.snapshot_every if annotate.enabled() else 0       # TINYPROF=0: nothing to take

    def snapshot(step: int) -> None:
        if every > 0 and step % every == every - 1 and not prof.snapshot(timeout=60):
            print(f"tinyprof.demo: snapshot after step {step + 1} unfinished", file=sys.stderr)

    residual = solve(comm, args.steps, args.rows, args.cols, after_step=snapshot)
    tinyprof.flush()
    elapsed = comm.reduce(MPI.Wtime() - start, op=MPI.MAX)
    snaps = session.current().snapshot_stats()
    taken = comm.reduce(snaps.taken, op=MPI.MAX)
    cpu = comm.reduce(snaps.cpu, op=MPI.MAX)
    if comm.Get_rank() == 0:        # the reductions' results are rank 0's
        assert elapsed is not None and cpu is not None
        where = f"profile in {args.outdir}" if annotate.enabled() else "profiling off (TINYPROF=0)"
        print(f"heat: {comm.Get_size()} ranks, {args.steps} steps, residual {residual:.3g}; "
              f"{where}; {elapsed:.3f} s; "
              f"{taken} snapshots, {1e3 * cpu:.1f} ms CPU in them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
