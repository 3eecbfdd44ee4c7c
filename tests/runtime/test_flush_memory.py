"""The flush's memory per callpath and per traced occurrence (issue 34).

Each run records in a process of its own and measures the flush with
``tracemalloc``: what the flush allocates is counted, not how long it takes,
so the bounds hold on a loaded machine. The bounds sit between the flush
before the fix (about 1,190 B per callpath, 135 B per occurrence) and after
(about 650 B and 103 B); docs/performance.md ("Big runs") has the figures of
``benchmarks/bigruns.py``.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

RUN = textwrap.dedent("""
    import sys, tracemalloc
    import tinyprof
    from tinyprof import Event

    case, n = sys.argv[1], int(sys.argv[2])
    out = "out"                     # in the test's directory (the process's cwd)
    prof = tinyprof.Profiler("m", outdir=out, mpi=False, trace=case == "trace",
                             trace_limit=n + 10 if case == "trace" else None)
    with Event("main"):
        for i in range(n):
            with Event(f"k{i}" if case == "callpaths" else "kernel"):
                pass
    import numpy                    # the first flush loads it (issue 35): a fixed cost, not per item
    tracemalloc.start()
    prof.flush()
    print(tracemalloc.get_traced_memory()[1] / n)
    prof.close()
""")


@pytest.mark.slow           # 50,000 callpaths and 300,000 occurrences, flushed under tracemalloc
@pytest.mark.parametrize("case, n, bound", [("callpaths", 50_000, 900),
                                            ("trace", 300_000, 125)])
def test_the_flush_peak_per_item_is_bounded(tmp_path, case, n, bound):
    env = dict(os.environ, TINYPROF_MPI="0", PYTHONPATH=os.pathsep.join(
        [ROOT, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", RUN, case, str(n)], env=env,
                          capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr
    per_item = float(proc.stdout.split()[-1])
    assert per_item < bound, f"{case}: {per_item:.0f} B per item"
