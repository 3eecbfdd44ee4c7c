"""``tinyprof pop PROFILE``: the POP efficiencies per callpath (docs/pop.md)."""
from __future__ import annotations

import argparse
import sys

from . import options
from .exit import echo


def register(commands: options.Commands) -> None:
    parser = commands.add_parser(
        "pop", help="print the POP efficiencies per callpath (mpi=True)",
        description="Print, per callpath and inclusive of the regions below it, the POP "
                    "metrics: load balance, communication efficiency and parallel efficiency, "
                    "from the time outside MPI calls (useful time). As a tree, worst parallel "
                    "efficiency first among siblings. Exit status 1 when the profile holds no "
                    "MPI data. See docs/pop.md.")
    options.add_profile(parser)
    parser.add_argument("--callpath", metavar="PATH",
                        help="only this region and those below it, written main<halo or main/halo")
    parser.add_argument("--hosts", metavar="LIST",
                        help="the host of each rank, comma-separated (NAME*N: N ranks in a row; "
                             "%%25, %%2C, %%2A for %%, comma, * in a name), instead of those the run "
                             "recorded: the load balance within (LB in) and across nodes (LB out)")
    parser.add_argument("--trace", action="store_true",
                        help="split communication efficiency into serialization and transfer "
                             "efficiency, by replaying a traced run (trace=True) on an ideal network")
    parser.add_argument("--over-time", action="store_true",
                        help="per interval between the kept snapshots of an output directory "
                             "(Profiler(keep='all'))")
    parser.add_argument("--limit", type=options.parse_count, default=0, metavar="N",
                        help="with --over-time, print at most N rows (default 0: all)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..analysis import pop, snapshot_intervals
    from ..analysis.profile import read
    from ..errors import FormatError
    from ..format import hostlist
    from ..views import pop_text as pop_text

    profile = read(args.profile)
    try:
        # read against the newest set, which holds every callpath of the run's snapshots
        callpath = profile.callpath(args.callpath) if args.callpath else None
        hosts = hostlist.decode(args.hosts, profile.nranks, "--hosts") if args.hosts else None
        if args.over_time and args.trace:
            raise pop.PopError("--over-time has no --trace: the split needs a whole trace, "
                               "which periodic snapshots do not hold (docs/trace.md)")
        if args.over_time:
            frame = snapshot_intervals.history(args.profile, callpath, hosts)
            if not len(frame["callpath"]):
                raise pop.PopError(f"{args.profile}: no callpath closed between snapshots")
            echo(pop_text.history(profile.name, profile.nranks, frame, args.limit or None))
        else:
            echo(pop_text.table(profile, pop.pop(profile, callpath, hosts, args.trace)))
    except FormatError:                   # a bad file: status 2, as in every command
        raise
    except (ValueError, KeyError) as e:   # no MPI data, trace or snapshots; bad --hosts, --callpath
        print(f"tinyprof: {e.args[0] if isinstance(e, KeyError) else e}", file=sys.stderr)
        return 1
    return 0
