"""What choosing the profile costs ``read(outdir)``: an output directory of one
run with N snapshots kept (``keep="all"``, one file each) and its flushed set.

    .venv/bin/python benchmarks/read_outdir.py [--snapshots 300] [--repeats 7]

``read`` looks at the head (four lines) of every snapshot file once to tell
runs apart (docs/format.md, "Snapshots"). Prints the median time of
``read(outdir)`` and of ``read(outdir, snapshot=N)`` (docs/performance.md).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile

from many_runs import median_s

import tinyprof

MAKE = """
import sys, tinyprof
p = tinyprof.Profiler("b", outdir=sys.argv[1], keep="all")
with tinyprof.Event("main"):
    for i in range(int(sys.argv[2])):
        with tinyprof.Event("step", loop=1):
            pass
        p.snapshot()
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snapshots", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        out = f"{scratch}/out"
        subprocess.run([sys.executable, "-c", MAKE, out, str(args.snapshots)], check=True)
        tinyprof.read(out)          # imports and caches warm
        newest = median_s(lambda: tinyprof.read(out), args.repeats) * 1e3
        one = median_s(lambda: tinyprof.read(out, snapshot=args.snapshots), args.repeats) * 1e3
    print(f"| snapshots | read(outdir) | read(outdir, snapshot={args.snapshots}) |")
    print("| ---: | ---: | ---: |")
    print(f"| {args.snapshots} | {newest:.1f} ms | {one:.1f} ms |")


if __name__ == "__main__":
    main()
