"""The history page of many runs: ``tinyprof report RUNS_DIR -o page.html``'s
work (``views.history_page.write``: read_many, the regressions between consecutive
runs, the page's data and the HTML), timed.

    .venv/bin/python benchmarks/history.py [--runs 1000] [--ranks 8] [--callpaths 200] [--repeats 3] [--mpi]

The runs are benchmarks/many_runs.py's (one file each, with run metadata;
``--mpi``: and MPI calls, so the page holds each callpath's MPI time and bytes).
Prints the median of each step over the repeats and the page's size
(docs/performance.md, "The history page"). With ``--mpi``, also the MPI
sections of all runs read by the C parser and by the pure-Python reference
(``TINYPROF_PURE=1``), alternating, and their ratio.
"""
from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time

import many_runs

from tinyprof.analysis import mpi_tables
from tinyprof.analysis.profile import read_runs
from tinyprof.views import history_page, report_page


def main() -> None:
    parser = many_runs.parser_of(__doc__)
    parser.add_argument("--keep", metavar="FILE", help="copy the page there (to open it)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        where = os.path.join(scratch, "runs")
        many_runs.write_runs(where, args.runs, args.ranks, args.callpaths, args.mpi)
        out = os.path.join(scratch, "page.html")
        report_page.plotly_js()                              # imports and caches warm
        loaded = read_runs([where])
        parts = {"load (read_many, sort)": lambda: read_runs([where]),
                 "build (regressions, data)": lambda: history_page.build(*loaded),
                 "whole: report RUNS -o page.html": lambda: history_page.write([where], out)}
        times = {name: many_runs.median_s(call, args.repeats) for name, call in parts.items()}
        if args.mpi:
            files = [f for p in loaded[0] for f in p.parsed]
            sections: dict = {"mpi sections (C)": [], "mpi sections (reference)": []}
            for _ in range(args.repeats):           # alternating, so both see the same load
                for name, pure in zip(sections, ("", "1")):
                    os.environ["TINYPROF_PURE"] = pure
                    sections[name].append(many_runs.median_s(lambda: mpi_tables.load(files), 1))
            del os.environ["TINYPROF_PURE"]
            times.update({name: statistics.median(t) for name, t in sections.items()})
        size = os.path.getsize(out)
        if args.keep:
            shutil.copy(out, args.keep)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"{args.runs} runs of {args.ranks} ranks, {args.callpaths} callpaths{', MPI' if args.mpi else ''}; "
          f"{cores} cores; "
          f"load average {os.getloadavg()[0]:.1f}; median of {args.repeats}")
    print("| " + " | ".join(times) + " | page |")
    print("| " + " | ".join("---:" for _ in range(len(times) + 1)) + " |")
    print("| " + " | ".join(f"{t:.2f} s" for t in times.values()) + f" | {size / 1e6:.1f} MB |")
    if args.mpi:
        print(f"mpi sections: the C parser {times['mpi sections (reference)'] / times['mpi sections (C)']:.1f}x "
              "faster than the reference")


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"(the benchmark took {time.perf_counter() - start:.0f} s, writing the runs included)")
