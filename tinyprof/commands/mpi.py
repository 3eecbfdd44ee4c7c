"""``tinyprof mpi PROFILE``: the MPI calls per callpath, communicator, operation and size."""
from __future__ import annotations

import argparse
import sys

from . import options


def register(commands: options.Commands) -> None:
    parser = commands.add_parser(
        "mpi", help="print the MPI calls per callpath, communicator, operation and size",
        description="Print the MPI calls of a profile recorded with MPI capture, summed per "
                    "distinct value of the --by fields: calls, bytes, time, bytes per call and "
                    "share of the whole MPI time. Exit status 1 when the profile holds no MPI "
                    "data or no call matches. See docs/convert.md.")
    options.add_profile(parser)
    parser.add_argument("--by", type=options.parse_by_keys, default=list(options.DEFAULT_BY), metavar="KEYS",
                        help=f"comma-separated fields to group by, from {', '.join(options.KEYS)} "
                             f"(bucket: the size; default: {','.join(options.DEFAULT_BY)}); transport "
                             "(optionally with rank): the UCX protocols and transports, "
                             "recorded with Profiler(ucx=True)")
    parser.add_argument("--callpath", action="append", default=[], metavar="PATH",
                        help="keep the calls in this region and below it, written main<halo or "
                             "main/halo (repeat for several)")
    parser.add_argument("--comm", action="append", default=[], metavar="NAME",
                        help="keep the calls on this communicator (repeat for several)")
    parser.add_argument("--sort", choices=options.SORTS, default="time",
                        help="largest first by this column (default: time)")
    parser.add_argument("--limit", type=options.parse_count, default=0, metavar="N",
                        help="print at most N rows (default 0: all)")
    parser.add_argument("--comms", action="store_true",
                        help="also print the communicators: size, world ranks, creating callpath")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..analysis import mpi_tables
    from ..analysis.profile import read
    from ..errors import excerpt
    from ..views import mpi_text

    profile = read(args.profile)
    limit = args.limit or None          # 0: all, as in every command
    if not profile.mpi_recorded:
        missing = profile.metadata.get("mpi_capture")
        why = (f"MPI capture was asked for but unavailable: {missing}" if missing is not None
               else "record with Profiler(mpi=True) or TINYPROF_MPI=1")
        print(f"tinyprof: profile {excerpt(profile.name)} holds no MPI data ({why})", file=sys.stderr)
        return 1
    if "transport" in args.by:
        print(mpi_text.transport(profile, args.callpath, "rank" in args.by, limit))
        return 0
    rows = mpi_tables.group(profile, args.by, args.callpath, args.comm)
    print(mpi_text.table(profile, rows, args.by, args.sort, limit))
    if args.comms:
        print(f"\n{mpi_text.communicators(profile)}")
    if not rows:
        print("tinyprof: no MPI call matches", file=sys.stderr)
    return 0 if rows else 1
