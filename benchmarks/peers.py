"""tinyprof against the profilers a Python MPI user would otherwise pick.

    .venv/bin/python benchmarks/peers.py            # about 10 minutes
    .venv/bin/python benchmarks/peers.py --quick    # 4 ranks, 3 repeats, 10^5 regions

Two workloads, each run by every tool in one interleaved round, median of
``--repeats`` rounds:

- the demo application (tinyprof.demo's heat solver) under mpiexec at 4 and
  8 ranks, ``--steps`` steps; every rank writes its own output, except
  tinyprof, which flushes one aggregated profile;
- a micro-benchmark in one process: ``--regions`` annotated regions
  (``main`` > 1000 x ``step`` > ``kernel``), each summing a 100-int tuple.

Tools: no profiling; tinyprof; tinyprof with snapshots
(``Profiler(frequency=1)``); VizTracer's ``log_event`` around the same regions
(the tracer is never started, so no function is traced); VizTracer's default
tracing of every call; cProfile; pyinstrument. Only tinyprof and VizTracer
``log_event`` use the annotations; the others record what they record by
default, on the micro-benchmark's loops without annotations and on the demo
with ``TINYPROF=0`` (its few thousand regions become no-ops).

Per tool: run time (start of profiling to the end of the workload, slowest
rank), overhead against no profiling, write time (stop + save, slowest rank),
output size (all files), load time (in this process, after the imports:
tinyprof ``read`` + ``to_hatchet``; VizTracer ``json.load`` of every file;
cProfile ``pstats.Stats`` of all files; pyinstrument ``Session.load`` of every
file). Overhead = (run + write) / (run + write of no profiling) - 1.
Prints Markdown tables (docs/performance.md, "Against peers").
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")   # numpy's idle BLAS threads off our cores

TOOLS = ("none", "tinyprof", "tinyprof+snapshots", "viztracer log_event",
         "viztracer tracing", "cProfile", "pyinstrument")
DATA = tuple(range(100))          # a micro-benchmark region sums this
OUTER = 1000                      # micro-benchmark: steps, each with regions/OUTER kernels


class Session:
    """One tool on one process: ``event`` annotates a region (None: the tool
    uses no annotations), ``start()`` begins profiling, ``write()`` stops it
    and saves this process's output."""

    def __init__(self, tool: str, outdir: str, rank: int, regions: int) -> None:
        import tinyprof
        from tinyprof import demo

        # The regions of the workload: None runs it without annotations.
        self.event: Optional[Callable] = tinyprof.Event if tool.startswith("tinyprof") else None
        self.path = os.path.join(outdir, f"rank{rank}")
        if tool.startswith("tinyprof"):
            frequency = 1 if tool == "tinyprof+snapshots" else 0
            self.start = lambda: tinyprof.Profiler("peers", frequency, demo.SELFKEYS,
                                                   outdir=outdir)
            self.write = tinyprof.flush
        elif tool.startswith("viztracer"):
            from viztracer import VizTracer
            # log_event keeps every region only if the ring buffer holds them all;
            # default tracing keeps VizTracer's default buffer (1M entries).
            entries = max(1_000_000, 2 * regions) if tool == "viztracer log_event" else 1_000_000
            tracer = VizTracer(tracer_entries=entries, verbose=0)
            if tool == "viztracer log_event":
                self.event = lambda name, **_: tracer.log_event(name)
                self.start = lambda: None
            else:
                self.start = tracer.start
            self.write = lambda: (tracer.stop(), tracer.save(self.path + ".json"))
        elif tool == "cProfile":
            import cProfile
            prof = cProfile.Profile()
            self.start = prof.enable
            self.write = lambda: (prof.disable(), prof.dump_stats(self.path + ".pstats"))
        elif tool == "pyinstrument":
            import pyinstrument
            sampler = pyinstrument.Profiler()
            self.start = sampler.start
            self.write = lambda: sampler.stop().save(self.path + ".pyisession")
        else:
            self.start = self.write = lambda: None


def micro(event: Optional[Callable], regions: int) -> int:
    """``regions`` annotated regions: main > OUTER x step > kernel; the same
    loops without annotations when ``event`` is None."""
    total = 0
    if event is None:
        for _ in range(OUTER):
            for _ in range(regions // OUTER):
                total += sum(DATA)
        return total
    with event("main"):
        for _ in range(OUTER):
            with event("step", loop=1):
                for _ in range(regions // OUTER):
                    with event("kernel", loop=1):
                        total += sum(DATA)
    return total


def worker(args: argparse.Namespace) -> None:
    """One run of one tool; prints ``{"run": s, "write": s}`` (slowest rank)."""
    if args.regions:
        session = Session(args.tool, args.outdir, 0, args.regions)
        start = time.perf_counter()
        session.start()
        micro(session.event, args.regions)
        middle = time.perf_counter()
        session.write()
        print(json.dumps({"run": middle - start, "write": time.perf_counter() - middle}))
        return
    from mpi4py import MPI

    from tinyprof import demo

    comm = MPI.COMM_WORLD
    session = Session(args.tool, args.outdir, comm.Get_rank(), 0)
    comm.Barrier()
    start = MPI.Wtime()
    session.start()
    # Without annotations, the demo's regions are TINYPROF=0 no-ops (~0.1 ms a run).
    demo.solve(comm, args.steps, args.rows, args.cols, event=session.event or demo.Event)
    middle = MPI.Wtime()
    session.write()
    times = comm.gather((middle - start, MPI.Wtime() - middle), root=0)
    if comm.Get_rank() == 0:
        print(json.dumps({"run": max(t[0] for t in times), "write": max(t[1] for t in times)}))


def load(tool: str, outdir: str) -> bool:
    """Load a run's output for analysis, as its users would; True if the
    output says it lost data (VizTracer's ring buffer overflowed)."""
    files = sorted(os.path.join(outdir, f) for f in os.listdir(outdir))
    if tool.startswith("tinyprof"):
        import tinyprof
        tinyprof.to_hatchet(tinyprof.read(outdir))
    elif tool.startswith("viztracer"):
        lost = False
        for path in files:
            with open(path) as f:
                lost |= bool(json.load(f)["viztracer_metadata"].get("overflow"))
        return lost
    elif tool == "cProfile":
        import pstats
        pstats.Stats(*files)
    elif tool == "pyinstrument":
        from pyinstrument.session import Session as Loaded
        for path in files:
            Loaded.load(path)
    return False


def _import_loaders() -> None:
    """Import what ``load`` needs once, so that no load time includes imports."""
    for module in ("pstats", "hatchet", "pyinstrument.session", "tinyprof.converters.hatchet"):
        importlib.import_module(module)


def run_once(tool: str, nranks: int, args: argparse.Namespace) -> Dict[str, float]:
    """Run ``tool`` on one workload (``nranks`` 0: the micro-benchmark), load
    its output, remove it; returns run, write and load time and output bytes."""
    outdir = tempfile.mkdtemp(prefix="tinyprof-peers-")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--tool", tool,
           "--outdir", outdir, "--steps", str(args.steps), "--rows", str(args.rows),
           "--cols", str(args.cols), "--regions", str(0 if nranks else args.regions)]
    if nranks:
        cmd = [os.path.join(os.path.dirname(sys.executable), "mpiexec"), "-n", str(nranks)] + cmd
    env = dict(os.environ, TINYPROF="1" if tool.startswith("tinyprof") else "0")
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env,
                             timeout=600).stdout
        result = json.loads(out.strip().splitlines()[-1])
        result["bytes"] = sum(os.path.getsize(os.path.join(outdir, f)) for f in os.listdir(outdir))
        start = time.perf_counter()
        result["lost"] = float(tool != "none" and load(tool, outdir))
        result["load"] = time.perf_counter() - start
    finally:
        shutil.rmtree(outdir, ignore_errors=True)
    return result


def table(title: str, runs: Dict[str, List[Dict[str, float]]]) -> str:
    """Medians per tool. The overhead is paired by round (each run against the
    no-profiling run of its own round), which cancels slow drifts of the
    machine's load; its range is the min..max over the rounds. "Best runs"
    compares the fastest run of the tool with the fastest without profiling:
    the least disturbed by other jobs."""
    med = {t: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for t, rs in runs.items()}
    best_none = min(r["run"] + r["write"] for r in runs["none"])
    lines = [title, "", "| tool | run s | overhead (median, range) | overhead, best runs "
             "| write s | output | load s |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for tool, m in med.items():
        ratios = [(r["run"] + r["write"]) / (n["run"] + n["write"]) - 1
                  for r, n in zip(runs[tool], runs["none"])]
        best = min(r["run"] + r["write"] for r in runs[tool]) / best_none - 1
        lost = " (ring buffer overflowed: oldest entries lost)" if m["lost"] else ""
        lines.append(f"| {tool} | {m['run']:.3f} | {statistics.median(ratios):+.1%} "
                     f"({min(ratios):+.0%}..{max(ratios):+.0%}) | {best:+.1%} | "
                     f"{m['write']:.3f} | {_size(m['bytes'])}{lost} | {m['load']:.3f} |")
    return "\n".join(lines)


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="4 ranks, 3 repeats, 10^5 regions: a check that everything runs")
    parser.add_argument("--ranks", default="4,8", help="rank counts of the demo (default 4,8)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=500, help="demo solver steps")
    parser.add_argument("--rows", type=int, default=64, help="demo rows of the first rank")
    parser.add_argument("--cols", type=int, default=1024, help="demo columns")
    parser.add_argument("--regions", type=int, default=1_000_000,
                        help="annotated regions of the micro-benchmark")
    parser.add_argument("--raw", metavar="FILE", help="also write every run's figures as JSON")
    parser.add_argument("--tools", default=",".join(TOOLS), help=argparse.SUPPRESS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tool", help=argparse.SUPPRESS)
    parser.add_argument("--outdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    if args.quick:
        args.ranks, args.repeats, args.regions = "4", 3, 100_000
    tools = args.tools.split(",")
    _import_loaders()
    workloads = [int(n) for n in args.ranks.split(",")] + [0]
    runs: Dict[int, Dict[str, list]] = {n: {t: [] for t in tools} for n in workloads}
    for _ in range(args.repeats):                   # interleaved: noise hits every tool alike
        for nranks in workloads:
            for tool in tools:
                runs[nranks][tool].append(run_once(tool, nranks, args))
    if args.raw:
        with open(args.raw, "w") as f:
            json.dump({"args": vars(args), "runs": runs}, f)
    for nranks in workloads:
        title = (f"Demo at {nranks} ranks, {args.steps} steps" if nranks else
                 f"Micro-benchmark, {args.regions:,} regions in one process")
        print(table(f"{title}, median of {args.repeats}:", runs[nranks]) + "\n")


if __name__ == "__main__":
    main()
