"""``tinyprof tune``: choose the aggregator count for your machine and file system.

    mpiexec -n P tinyprof tune [--callpaths 200] [--iterations 100] [--repeats 5] [--outdir DIR]
    mpiexec -n P python -m tinyprof.tune ...                     # the same

Runs the aggregator sweep of the paper's Fig. 6 on the ranks it is launched
on: every rank records a synthetic profile of ``--callpaths`` callpaths x
``--iterations`` loop iterations, then flushes it into ``--outdir`` with
A = P, P/2, ..., 1 aggregators (files), plus the count in force today
(``TINYPROF_AGGREGATORS``, else the default P // 16). Rank 0 prints the
median flush time per A with its phases, and recommends the A to set with
``export TINYPROF_AGGREGATORS=A``. The files it writes are removed at the end.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from typing import Dict, List, Optional, Sequence

# Only exit at the top: `tinyprof --help` builds this command's parser
# (add_arguments), so the layers are imported where they are used.
from .commands import exit

# Totals within this fraction of the fastest count as a tie: the fewest files win.
TOLERANCE = 0.10


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, not {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``tinyprof tune`` (shared by the CLI and ``python -m tinyprof.tune``)."""
    parser.add_argument("--callpaths", type=_positive, default=200,
                        help="callpaths of the synthetic profile on every rank (default 200)")
    parser.add_argument("--iterations", type=_positive, default=100,
                        help="loop iterations recorded per callpath (default 100)")
    parser.add_argument("--repeats", type=_positive, default=5,
                        help="flushes per aggregator count; the median is kept (default 5)")
    parser.add_argument("--outdir", default=".",
                        help="an existing directory, shared by all ranks, on the file "
                             "system to tune for: the profiles are written to a fresh "
                             "subdirectory of it, then removed (default: the current directory)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tinyprof.tune",
                                     description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.set_defaults(run=run)
    return parser


def counts(nranks: int) -> List[int]:
    """The aggregator counts to try at ``nranks`` ranks: the halvings of P and
    the count a flush uses today (environment or default), largest first."""
    from . import _sweep

    return sorted(set(_sweep.halvings(nranks)) | {current(nranks)}, reverse=True)


def current(nranks: int) -> int:
    """The aggregator count a flush over ``nranks`` ranks uses today."""
    from .runtime.settings import clamp_aggregators, env_aggregators

    return clamp_aggregators(env_aggregators(), nranks)


def recommend(runs: Sequence[Dict], tolerance: float = TOLERANCE) -> Dict:
    """The run to recommend: the fewest files among those whose median total
    is within ``tolerance`` of the fastest."""
    fastest = min(r["median"][0] for r in runs)
    return min((r for r in runs if r["median"][0] <= fastest * (1 + tolerance)),
               key=lambda r: r["A"])


def report(runs: Sequence[Dict], nranks: int, args: argparse.Namespace) -> str:
    """The table and the recommendation, as printed by rank 0."""
    from . import _sweep

    now = current(nranks)
    lines = [f"tinyprof tune: P = {nranks} ranks, {args.callpaths} callpaths x "
             f"{args.iterations} iterations per rank, median of {args.repeats} flushes, "
             "times in ms",
             "total: the slowest rank's flush; each phase: its own slowest rank, so the "
             "phases need not add up to the total",
             "",
             f"{'A (files)':>12} {'total':>9} {'min..max':>15} "
             + " ".join(f"{p:>9}" for p in _sweep.PARTS) + f" {'bytes':>12}"]
    for r in runs:
        label = f"{r['A']}{' *' if r['A'] == now else '  '}"
        total, *parts = r["median"][:1 + len(_sweep.PARTS)]
        spread = f"{1e3 * r['range'][0]:.1f}..{1e3 * r['range'][1]:.1f}"
        lines.append(f"{label:>12} {1e3 * total:9.1f} {spread:>15} "
                     + " ".join(f"{1e3 * t:9.1f}" for t in parts) + f" {r['bytes']:12,}")
    fastest = min(runs, key=lambda r: r["median"][0])
    best = recommend(runs)
    in_force = next(r for r in runs if r["A"] == now)
    source = "TINYPROF_AGGREGATORS" if os.environ.get("TINYPROF_AGGREGATORS", "").strip() \
        else "default P // 16"
    lines += ["", f"* = the count in force now ({source})",
              f"fastest: A = {fastest['A']} ({1e3 * fastest['median'][0]:.1f} ms)"]
    if best is not fastest:
        lines.append(f"A = {best['A']} is within {TOLERANCE:.0%} of the fastest with fewer "
                     "files: recommended (fewer files, less load on the file system's metadata)")
    if best is not in_force and best["range"][1] >= in_force["range"][0]:
        lines.append(f"note: the totals of A = {best['A']} and A = {now} overlap over the "
                     "repeats: the difference is within this machine's noise; rerun with "
                     "more --repeats to be sure")
    lines += [f"recommended: A = {best['A']} (P/{nranks / best['A']:.3g}); for other rank "
              "counts keep the ratio, or rerun at that P",
              f"export TINYPROF_AGGREGATORS={best['A']}"]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Run the sweep on the ranks of ``MPI.COMM_WORLD``; 0, or 2 if ``--outdir`` fails."""
    from . import _sweep, annotate
    from .runtime.world import launched_rank

    if not annotate.enabled():              # no flush to time
        if (launched_rank() or (0, 1))[0] == 0:
            print("tinyprof tune: profiling is off (TINYPROF=0): there is no flush to measure",
                  file=sys.stderr)
        return 1
    try:
        from mpi4py import MPI
    except ImportError:
        print("tinyprof tune: needs mpi4py: pip install 'tinyprof[mpi]'", file=sys.stderr)
        return 1
    comm = MPI.COMM_WORLD
    rank, nranks = comm.Get_rank(), comm.Get_size()
    try:
        current(nranks)
    except ValueError as e:              # a bad TINYPROF_AGGREGATORS
        if rank == 0:
            print(f"tinyprof tune: {str(e).removeprefix('tinyprof: ')}", file=sys.stderr)
        return 2
    scratch: Optional[str] = None
    if rank == 0:
        try:
            scratch = tempfile.mkdtemp(prefix="tinyprof-tune-", dir=args.outdir)
        except OSError as e:
            print(f"tinyprof tune: {args.outdir}: {e.strerror or e}", file=sys.stderr)
    scratch = comm.bcast(scratch, root=0)       # None: every rank stops
    if scratch is None:
        return 2
    try:
        _sweep.record(rank, args.callpaths, args.iterations)
        runs = _sweep.sweep(comm, scratch, counts(nranks), args.repeats, "tune")
        comm.Barrier()                          # no rank uses the files any more
    finally:
        if rank == 0:
            shutil.rmtree(scratch, ignore_errors=True)
    if rank == 0:
        print(report(runs, nranks, args), flush=True)
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``python -m tinyprof.tune``."""
    return exit.run("tinyprof tune", _parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
