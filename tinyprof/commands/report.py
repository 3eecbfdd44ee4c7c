"""``tinyprof report PROFILE... -o report.html``: the HTML report of a run, or
the history page of many."""
from __future__ import annotations

import argparse
import os
import sys

from . import options
from .exit import echo


def register(commands: options.Commands) -> None:
    parser = commands.add_parser(
        "report", help="write a self-contained HTML report of a run, or of many (needs tinyprof[report])",
        description="Write one HTML file that works offline. Of one PROFILE: the call tree (inclusive, "
                    "exclusive, share of the run, imbalance), each callpath across ranks and "
                    "iterations, a rank x callpath heatmap, the snapshots over time (an output "
                    "directory with keep='all'), the POP efficiencies, MPI communication and the "
                    "critical path and wait states when recorded. Of several PROFILEs, or a directory "
                    "of runs (its subdirectories holding a profile, and its sets of profile files; "
                    "others, such as logs/, are left out), or, with --snapshots, the kept snapshots "
                    "of one run: the history page: each callpath over the runs in start order, with "
                    "its MPI time and bytes in the runs that recorded them, the changes flagged "
                    "(each run against the runs since the callpath's last change, by the run-to-run "
                    "noise seen over the runs; --threshold, --floor, --metric, --inclusive as "
                    "tinyprof compare's), the diff of any two runs and the runs' metadata. "
                    "See docs/guide.md.")
    parser.add_argument("profiles", nargs="+", metavar="PROFILE",
                        help="a profile's output directory or any one file of it; several, or a "
                             "directory holding several runs, for the history page")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="the HTML file to write (default: report.html)")
    parser.add_argument("--snapshots", action="store_true",
                        help="the history page of the snapshots of one run (Profiler(keep='all'))")
    parser.add_argument("--skip-bad", action="store_true",
                        help="with several runs, leave out (naming them) those that cannot be read")
    parser.add_argument("--metric", metavar="M",
                        help="with several runs, the value over the runs and flagged: time (default) "
                             "or a custom per-occurrence metric, summed per rank (as compare's)")
    parser.add_argument("--inclusive", action="store_true",
                        help="with several runs, flag on inclusive time instead of exclusive time")
    parser.add_argument("--threshold", type=options.parse_percent, metavar="PCT",
                        help="with several runs, flag only changes beyond PCT percent "
                             f"(default {options.THRESHOLD * 100:g})")
    parser.add_argument("--floor", type=options.parse_percent, metavar="PCT",
                        help="with several runs, flag only changes of at least PCT percent of the "
                             f"baseline runs' time (default {options.FLOOR * 100:g})")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import warnings

    from ..format import output_dir
    from ..views import history_page, report_page

    output = args.output or "report.html"
    runs = output_dir.runs_in(args.profiles)
    many = args.snapshots or runs != [os.fspath(args.profiles[0])]
    given = [option for option, value in (("--skip-bad", args.skip_bad), ("--threshold", args.threshold),
                                          ("--floor", args.floor), ("--metric", args.metric),
                                          ("--inclusive", args.inclusive))
             if value is not None and value is not False]      # --threshold 0 is given
    if not many and given:
        print(f"tinyprof report: {', '.join(given)}: for several runs", file=sys.stderr)
        return 2
    try:
        with warnings.catch_warnings(record=True) as skipped:
            warnings.simplefilter("always", RuntimeWarning)
            if many:
                rule = {name: pct / 100 for name, pct in (("threshold", args.threshold),
                                                          ("floor", args.floor)) if pct is not None}
                history_page.write(args.profiles, output, "skip" if args.skip_bad else "raise",
                              args.snapshots, metric=args.metric or "time", inclusive=args.inclusive,
                              **rule)
            else:
                report_page.write(args.profiles[0], output)
    except report_page.ReportError as e:
        print(f"tinyprof: {e}", file=sys.stderr)
        return 1
    except ValueError as e:             # no run left, --snapshots with several paths, a bad --metric
        print(f"tinyprof report: {e}", file=sys.stderr)
        return 2
    finally:
        for w in skipped:
            print(str(w.message), file=sys.stderr)
    echo(f"tinyprof: wrote {output}: open it in a browser (it works offline)")
    return 0
