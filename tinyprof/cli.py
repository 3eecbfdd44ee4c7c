"""The ``tinyprof`` and ``tinyprof-convert`` command lines.

``tinyprof show PROFILE`` prints a per-callpath summary across ranks;
``tinyprof report PROFILE -o report.html`` writes the HTML report;
``tinyprof mpi PROFILE`` prints its MPI calls as mpisee-through does;
``tinyprof pop PROFILE`` its POP efficiencies per callpath (docs/pop.md);
``tinyprof compare BASE NEW`` compares runs per callpath and, with
``--fail-above PCT``, gates regressions (exit 1);
``tinyprof run -n N ./app [args]`` profiles an unchanged MPI binary (docs/native.md);
``tinyprof critical-path PROFILE`` and ``tinyprof wait-states PROFILE``
analyse a traced run (docs/trace.md);
``tinyprof callflow PROFILE`` opens a profile in CallFlow;
``mpiexec -n P tinyprof tune`` recommends an aggregator count (``tune.py``);
``tinyprof-convert PROFILE --to FORMAT -o OUT`` converts a profile for
Hatchet, CallFlow, pandas, Perfetto or pprof (see docs/convert.md). Bad input ends with a
one-line message naming the file and exit status 2, never a traceback.
"""
from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
from typing import List, Optional

from . import _command, tune
from ._version import __version__
from .analysis.compare import FLOOR, THRESHOLD
from .analysis.values import STATISTICS
from .converters import TARGETS, ConvertError
from .format.encoding import FormatError, excerpt
from .views.mpi import DEFAULT_BY, KEYS, SORTS


def _show(args: argparse.Namespace) -> int:
    from .analysis.profile import read
    from .views.summary import summary

    print(summary(read(args.profile), args.profile))
    return 0


def _report(args: argparse.Namespace) -> int:
    import warnings

    from .views import history
    from .views import report as _report

    output = args.output or "report.html"
    runs = history.runs_in(args.profiles)
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
                history.write(args.profiles, output, "skip" if args.skip_bad else "raise",
                              args.snapshots, metric=args.metric or "time", inclusive=args.inclusive,
                              **rule)
            else:
                _report.write(args.profiles[0], output)
    except _report.ReportError as e:
        print(f"tinyprof: {e}", file=sys.stderr)
        return 1
    except ValueError as e:             # no run left, --snapshots with several paths, a bad --metric
        print(f"tinyprof report: {e}", file=sys.stderr)
        return 2
    finally:
        for w in skipped:
            print(str(w.message), file=sys.stderr)
    _echo(f"tinyprof: wrote {output}: open it in a browser (it works offline)")
    return 0


def _mpi(args: argparse.Namespace) -> int:
    from .analysis.profile import read
    from .views import mpi

    profile = read(args.profile)
    limit = args.limit or None          # 0: all, as in every command
    if not profile.mpi_recorded:
        missing = profile.metadata.get("mpi_capture")
        why = (f"MPI capture was asked for but unavailable: {missing}" if missing is not None
               else "record with Profiler(mpi=True) or TINYPROF_MPI=1")
        print(f"tinyprof: profile {excerpt(profile.name)} holds no MPI data ({why})", file=sys.stderr)
        return 1
    if "transport" in args.by:
        print(mpi.transport(profile, args.callpath, "rank" in args.by, limit))
        return 0
    rows = mpi.group(profile, args.by, args.callpath, args.comm)
    print(mpi.table(profile, rows, args.by, args.sort, limit))
    if args.comms:
        print(f"\n{mpi.communicators(profile)}")
    if not rows:
        print("tinyprof: no MPI call matches", file=sys.stderr)
    return 0 if rows else 1


def _pop(args: argparse.Namespace) -> int:
    from .analysis import over_time as _history
    from .analysis import pop as _analysis
    from .analysis.profile import read
    from .format import hostlist
    from .views import pop

    callpath = tuple(args.callpath.replace("/", "<").split("<")) if args.callpath else None
    profile = read(args.profile)
    try:
        hosts = hostlist.decode(args.hosts, profile.nranks, "--hosts") if args.hosts else None
        if args.over_time and args.trace:
            raise _analysis.PopError("--over-time has no --trace: the split needs a whole trace, "
                                     "which periodic snapshots do not hold (docs/trace.md)")
        if args.over_time:
            frame = _history.history(args.profile, callpath, hosts)
            if not len(frame["callpath"]):
                raise _analysis.PopError(f"{args.profile}: no callpath closed between snapshots")
            _echo(pop.history(profile.name, profile.nranks, frame, args.limit or None))
        else:
            _echo(pop.table(profile, _analysis.pop(profile, callpath, hosts, args.trace)))
    except FormatError:                   # a bad file: status 2, as in every command
        raise
    except (ValueError, KeyError) as e:   # no MPI data, trace or snapshots; bad --hosts, --callpath
        print(f"tinyprof: {e.args[0] if isinstance(e, KeyError) else e}", file=sys.stderr)
        return 1
    return 0


def _compare(args: argparse.Namespace) -> int:
    from .analysis.compare import compare
    from .views import compare as _view

    pair = len(args.runs) == 2 and not (args.base or args.new)
    if not (pair or (not args.runs and args.base and args.new)):
        print("tinyprof compare: give BASE NEW, or --base PROFILE... --new PROFILE...", file=sys.stderr)
        return 2
    base, new = (args.runs[:1], args.runs[1:]) if args.runs else (args.base, args.new)
    threshold = args.threshold if args.fail_above is None else min(args.threshold, args.fail_above)
    try:
        frame = compare(base, new, metric=args.metric, inclusive=args.inclusive,
                        threshold=threshold / 100, floor=args.floor / 100)
    except FormatError:                   # a bad file: status 2, as in every command
        raise
    except ValueError as e:               # a metric the profiles do not hold, a bad threshold
        print(f"tinyprof compare: {e}", file=sys.stderr)
        return 2
    _echo(_view.table(frame, args.limit or None))
    if args.fail_above is None:
        return 0
    failed = _view.regressions(frame, args.fail_above)
    for line in failed:
        print(f"tinyprof compare: regressed by more than {args.fail_above:g}%: {line}", file=sys.stderr)
    return 1 if failed else 0


def _percent(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value >= 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage (0, 5, 12.5, ...)")
    return value


def _run(args: argparse.Namespace) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    lib = os.path.join(here, "libtinyprof_mpi.so")
    missing = [p for p in (lib, os.path.join(here, "libtinyprof_whole.so")) if not os.path.exists(p)]
    if missing:
        from .runtime.capture import not_built
        reasons = "\n".join(not_built(p) for p in missing)
        print(f"tinyprof run: nothing would be profiled (docs/mpi.md):\n{reasons}", file=sys.stderr)
        return 1
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    mpiexec = args.mpiexec or (beside if os.access(beside, os.X_OK) else shutil.which("mpiexec") or "mpiexec")
    preload = ":".join(p for p in (lib, os.environ.get("LD_PRELOAD")) if p)
    settings = [f"LD_PRELOAD={preload}", f"TINYPROF_NAME={args.name or os.path.basename(args.program)}"]
    if args.outdir:
        settings.append(f"TINYPROF_OUTDIR={os.path.abspath(args.outdir)}")
    if args.site_depth:
        settings.append(f"TINYPROF_SITES={args.site_depth}")
    cmd = [mpiexec, "-n", str(args.nranks), "env", *settings, args.program, *args.args]
    try:
        return subprocess.call(cmd)
    except OSError as e:
        print(f"tinyprof run: {mpiexec}: {e.strerror or e}", file=sys.stderr)
        return 127


def _trace_command(args: argparse.Namespace) -> int:
    from .analysis.profile import read
    from .views import trace as _tracetext

    profile = read(args.profile)
    limit = args.limit or None          # 0: all, as in every command
    try:
        if args.command == "critical-path":
            text = _tracetext.critical_path(profile, limit, args.segments)
        else:
            text = _tracetext.wait_states(profile, limit)
    except ValueError as e:           # recorded without trace=True
        print(f"tinyprof: {e}", file=sys.stderr)
        return 1
    _echo(text)
    return 0


def _by(text: str) -> List[str]:
    keys = text.split(",")
    for key in keys:
        if key not in KEYS:
            raise argparse.ArgumentTypeError(f"{key!r} is not one of {','.join(KEYS)}")
    return keys


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a count (0, 1, 2, ...)")
    return int(text)


def _callflow(args: argparse.Namespace) -> int:
    from .analysis.profile import read
    from .converters import callflow

    if args.setup:
        _echo(f"tinyprof: CallFlow's environment is ready: {callflow.environment()}")
        return 0
    if args.profile is None:
        raise ConvertError("callflow: give a PROFILE (or --setup)")
    profile = read(args.profile)
    directory = args.output or f"{callflow.run_name(profile)}.callflow"
    _echo(f"tinyprof: wrote {callflow.write(profile, directory, args.statistic)}")
    callflow.run(directory, process_only=args.process_only, host=args.host, port=args.port)
    return 0


def _convert(args: argparse.Namespace) -> int:
    from .analysis.profile import read
    from .converters import convert

    _echo(convert(read(args.profile), args.target, args.output, args.statistic, args.table))
    return 0


def _echo(text: str) -> None:
    """Print ``text``, which names paths the user gave: a path of non-UTF-8 bytes
    holds lone surrogates, which a strict stdout cannot encode: those print as ``\\udcff``."""
    try:
        print(text, flush=True)
    except UnicodeEncodeError:
        print(text.encode("utf-8", "backslashreplace").decode("utf-8"), flush=True)


def _add_profile(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("profile", metavar="PROFILE",
                        help="a profile's output directory, or any one file of it")


def _add_statistic(parser: argparse.ArgumentParser, scope: str = "") -> None:
    parser.add_argument("--statistic", choices=STATISTICS, default="sum",
                        help="how the values of all executions and iterations of a callpath "
                             f"on a rank are aggregated{scope} (default: sum)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tinyprof", description="Always-on, annotation-based profiling for MPI applications.")
    parser.add_argument("--version", action="version", version=f"tinyprof {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    show = commands.add_parser("show", help="print a per-callpath summary across ranks",
                               description="Print min, mean and max across ranks of each "
                                           "callpath's time, and its slowest rank.")
    _add_profile(show)
    show.set_defaults(run=_show)
    report = commands.add_parser(
        "report", help="write a self-contained HTML report of a run, or of many (needs tinyprof[report])",
        description="Write one HTML file that works offline. Of one PROFILE: the call tree (inclusive, "
                    "exclusive, share of the run, imbalance), each callpath across ranks and "
                    "iterations, a rank x callpath heatmap, the snapshots over time (an output "
                    "directory with keep='all'), the POP efficiencies, MPI communication and the "
                    "critical path and wait states when recorded. Of several PROFILEs, or a directory "
                    "of runs (its subdirectories holding a profile, and its sets of profile files; "
                    "others, such as logs/, are left out), or, with --snapshots, the kept snapshots "
                    "of one run: the history page: each callpath over the runs in start order, with "
                    "its MPI time and bytes in the runs that recorded them, the regressions flagged "
                    "between consecutive runs by the rule of tinyprof compare (--threshold, --floor, "
                    "--metric, --inclusive), the diff of any two runs and the runs' metadata. "
                    "See docs/guide.md.")
    report.add_argument("profiles", nargs="+", metavar="PROFILE",
                        help="a profile's output directory or any one file of it; several, or a "
                             "directory holding several runs, for the history page")
    report.add_argument("-o", "--output", metavar="FILE",
                        help="the HTML file to write (default: report.html)")
    report.add_argument("--snapshots", action="store_true",
                        help="the history page of the snapshots of one run (Profiler(keep='all'))")
    report.add_argument("--skip-bad", action="store_true",
                        help="with several runs, leave out (naming them) those that cannot be read")
    report.add_argument("--metric", metavar="M",
                        help="with several runs, the value over the runs and flagged: time (default) "
                             "or a custom per-occurrence metric, summed per rank (as compare's)")
    report.add_argument("--inclusive", action="store_true",
                        help="with several runs, flag on inclusive time instead of exclusive time")
    report.add_argument("--threshold", type=_percent, metavar="PCT",
                        help="with several runs, flag only changes beyond PCT percent "
                             f"(default {THRESHOLD * 100:g})")
    report.add_argument("--floor", type=_percent, metavar="PCT",
                        help="with several runs, flag only changes of at least PCT percent of the "
                             f"earlier run's time (default {FLOOR * 100:g})")
    report.set_defaults(run=_report)
    mpi = commands.add_parser(
        "mpi", help="print the MPI calls per callpath, communicator, operation and size",
        description="Print the MPI calls of a profile recorded with MPI capture, summed per "
                    "distinct value of the --by fields: calls, bytes, time, bytes per call and "
                    "share of the whole MPI time. Exit status 1 when the profile holds no MPI "
                    "data or no call matches. See docs/convert.md.")
    _add_profile(mpi)
    mpi.add_argument("--by", type=_by, default=list(DEFAULT_BY), metavar="KEYS",
                     help=f"comma-separated fields to group by, from {', '.join(KEYS)} "
                          f"(bucket: the size; default: {','.join(DEFAULT_BY)}); transport "
                          "(optionally with rank): the UCX protocols and transports, "
                          "recorded with Profiler(ucx=True)")
    mpi.add_argument("--callpath", action="append", default=[], metavar="PATH",
                     help="keep the calls in this region and below it, written main<halo or "
                          "main/halo (repeat for several)")
    mpi.add_argument("--comm", action="append", default=[], metavar="NAME",
                     help="keep the calls on this communicator (repeat for several)")
    mpi.add_argument("--sort", choices=SORTS, default="time",
                     help="largest first by this column (default: time)")
    mpi.add_argument("--limit", type=_count, default=0, metavar="N",
                     help="print at most N rows (default 0: all)")
    mpi.add_argument("--comms", action="store_true",
                     help="also print the communicators: size, world ranks, creating callpath")
    mpi.set_defaults(run=_mpi)
    pop = commands.add_parser(
        "pop", help="print the POP efficiencies per callpath (mpi=True)",
        description="Print, per callpath and inclusive of the regions below it, the POP "
                    "metrics: load balance, communication efficiency and parallel efficiency, "
                    "from the time outside MPI calls (useful time). As a tree, worst parallel "
                    "efficiency first among siblings. Exit status 1 when the profile holds no "
                    "MPI data. See docs/pop.md.")
    _add_profile(pop)
    pop.add_argument("--callpath", metavar="PATH",
                     help="only this region and those below it, written main<halo or main/halo")
    pop.add_argument("--hosts", metavar="LIST",
                     help="the host of each rank, comma-separated (NAME*N: N ranks in a row; "
                          "%%25, %%2C, %%2A for %%, comma, * in a name), instead of those the run "
                          "recorded: the load balance within (LB in) and across nodes (LB out)")
    pop.add_argument("--trace", action="store_true",
                     help="split communication efficiency into serialization and transfer "
                          "efficiency, by replaying a traced run (trace=True) on an ideal network")
    pop.add_argument("--over-time", action="store_true",
                     help="per interval between the kept snapshots of an output directory "
                          "(Profiler(keep='all'))")
    pop.add_argument("--limit", type=_count, default=0, metavar="N",
                     help="with --over-time, print at most N rows (default 0: all)")
    pop.set_defaults(run=_pop)
    comp = commands.add_parser(
        "compare", help="compare runs per callpath; with --fail-above, a regression gate for CI",
        description="Compare the NEW run(s) against the BASE run(s) per callpath: time per rank "
                    "(exclusive by default), its change, a t-test's p-value, and the MPI time "
                    "and bytes when both sides recorded them; flagged regressions first. "
                    "With --fail-above PCT, exit status 1 when a callpath regressed by more than "
                    "PCT percent (naming it on stderr), else 0; bad input: status 2. "
                    "See docs/guide.md#comparing-runs-and-gating-regressions.")
    comp.add_argument("runs", nargs="*", metavar="BASE NEW",
                      help="one base and one new profile (output directory or any file of it)")
    comp.add_argument("--base", nargs="+", default=[], metavar="PROFILE",
                      help="several base runs (with --new instead of BASE NEW)")
    comp.add_argument("--new", nargs="+", default=[], metavar="PROFILE", help="several new runs")
    comp.add_argument("--fail-above", type=_percent, metavar="PCT",
                      help="exit 1 when a flagged regression exceeds PCT percent (a PCT below "
                           "--threshold lowers it)")
    comp.add_argument("--metric", default="time",
                      help="time (default) or a custom per-occurrence metric, summed per rank")
    comp.add_argument("--inclusive", action="store_true",
                      help="compare inclusive time instead of exclusive time")
    comp.add_argument("--threshold", type=_percent, default=THRESHOLD * 100, metavar="PCT",
                      help=f"flag only changes beyond PCT percent (default {THRESHOLD * 100:g})")
    comp.add_argument("--floor", type=_percent, default=FLOOR * 100, metavar="PCT",
                      help=f"flag only changes of at least PCT percent of the base run's time "
                           f"(default {FLOOR * 100:g})")
    comp.add_argument("--limit", type=_count, default=0, metavar="N",
                      help="print at most N rows (default 0: all)")
    comp.set_defaults(run=_compare)
    flow = commands.add_parser(
        "callflow", help="open a profile in CallFlow (in an environment of its own)",
        description="Convert a profile to CallFlow's input, process it with CallFlow "
                    "(with the fixes CallFlow 1.3.0 needs) and serve CallFlow's "
                    "web app. CallFlow runs in a virtual environment of its own, made on "
                    "first use (TINYPROF_CALLFLOW_ENV, else ~/.cache/tinyprof/callflow-1.3.0). "
                    "See docs/convert.md.")
    flow.add_argument("profile", metavar="PROFILE", nargs="?",
                      help="a profile's output directory, or any one file of it")
    flow.add_argument("--setup", action="store_true",
                      help="only make CallFlow's environment (if missing), then exit")
    flow.add_argument("-o", "--output", metavar="DIR",
                      help="CallFlow's data directory (default: NAME.callflow)")
    _add_statistic(flow)
    flow.add_argument("--process-only", action="store_true",
                      help="process the data, then exit instead of serving the app")
    flow.add_argument("--host", help="address to serve on (default: CALLFLOW_APP_HOST or 127.0.0.1)")
    flow.add_argument("--port", type=int, help="port to serve on (default: CALLFLOW_APP_PORT or 5000)")
    flow.set_defaults(run=_callflow)
    for name, text, description in (
            ("critical-path", "print the critical path of a traced run (trace=True)",
             "Print the critical path through a run recorded with trace mode: its length "
             "against the wall time, and its time per rank and callpath, largest first. "
             "See docs/trace.md."),
            ("wait-states", "print the time ranks waited in MPI calls (trace=True)",
             "Print, per callpath and rank, the time spent waiting for a late sender, a late "
             "receiver, or the last arrival at a collective or barrier. See docs/trace.md.")):
        sub = commands.add_parser(name, help=text, description=description)
        _add_profile(sub)
        sub.add_argument("--limit", type=_count, default=20, metavar="N",
                         help="print at most N rows (default 20; 0: all)")
        if name == "critical-path":
            sub.add_argument("--segments", action="store_true",
                             help="print the path's segments in time order instead")
        sub.set_defaults(run=_trace_command)
    run = commands.add_parser(
        "run", help="profile an unchanged MPI program (C, C++, Fortran) under mpiexec",
        description="Run PROGRAM on N ranks with tinyprof's MPI library preloaded: the whole "
                    "program is profiled under one region named after it, from MPI_Init to "
                    "MPI_Finalize, with its MPI calls. Runs `mpiexec -n N env LD_PRELOAD=... "
                    "PROGRAM ARGS` and exits with its status. See docs/native.md.")
    run.add_argument("-n", dest="nranks", type=_count, required=True, metavar="N", help="number of ranks")
    run.add_argument("-o", "--outdir", metavar="DIR", help="output directory (default: NAME.tinyprof)")
    run.add_argument("--name", help="profile name (default: the program's file name)")
    run.add_argument("--site-depth", type=_count, default=0, metavar="K",
                     help="charge each MPI call to the K innermost frames of the program that "
                          "made it (call sites, at most 16; default 0: to the program's region); "
                          "read back as function (file:line) with addr2line when the binary is there")
    run.add_argument("--mpiexec", metavar="PATH",
                     help="the MPI launcher (default: mpiexec beside this Python, else on PATH)")
    run.add_argument("program", metavar="PROGRAM", help="the program to run")
    run.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="its arguments")
    run.set_defaults(run=_run)
    tuner = commands.add_parser(
        "tune", help="recommend an aggregator count for this machine (run under mpiexec)",
        description="Run the aggregator sweep (paper Fig. 6) on the ranks this is launched "
                    "on, print the flush time per aggregator count and recommend one for "
                    "TINYPROF_AGGREGATORS. Usage: mpiexec -n P tinyprof tune ...")
    tune.add_arguments(tuner)
    tuner.set_defaults(run=tune.run)
    return parser


def _convert_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tinyprof-convert",
        description="Convert a tinyprof profile for Hatchet, CallFlow, pandas, Perfetto or pprof. "
                    "hatchet: a Caliper json-split file for hatchet's GraphFrame.from_caliper; "
                    "callflow: a directory for `callflow --data_path DIR --profile_format "
                    "caliper_json`; csv: one row per rank, execution and iteration; perfetto: the "
                    "timeline of a traced profile as Chrome trace-event JSON for ui.perfetto.dev; "
                    "pprof: a gzipped profile.proto for go tool pprof, Pyroscope or speedscope. "
                    "See docs/convert.md.")
    parser.add_argument("--version", action="version", version=f"tinyprof {__version__}")
    _add_profile(parser)
    parser.add_argument("--to", dest="target", required=True, choices=TARGETS, metavar="FORMAT",
                        help=f"output format: {', '.join(TARGETS)}")
    parser.add_argument("-o", "--output", required=True, metavar="OUT",
                        help="output file (a directory for callflow)")
    _add_statistic(parser, " for hatchet and callflow; csv keeps every value, pprof sums")
    parser.add_argument("--table", choices=("values", "mpi"), default="values",
                        help="for csv: every value (default), or the MPI calls (profiles "
                             "recorded with MPI capture)")
    parser.set_defaults(run=_convert)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of the ``tinyprof`` console script."""
    return _command.run("tinyprof", _parser().parse_args(argv))


def convert_main(argv: Optional[List[str]] = None) -> int:
    """Entry point of the ``tinyprof-convert`` console script."""
    parser = _convert_parser()
    args = parser.parse_args(argv)
    if args.table != "values" and args.target != "csv":
        parser.error(f"--table {args.table} needs --to csv")
    return _command.run("tinyprof-convert", args)


if __name__ == "__main__":
    sys.exit(main())
