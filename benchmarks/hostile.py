"""Hostile file shapes (issue 34), read and converted by this tree and by another
(a baseline checkout with its own .venv): time and peak memory of each step.

    .venv/bin/python benchmarks/hostile.py [--base /work/base] [--runs 3] [--timeout 120]
        [--ops read,loop] [--only nested]

The files are written once into a temporary directory, by the encoder of the
base tree when there is one (its format version, which this tree reads too):
one chain of 5,000 and of 20,000 nested callpaths (73 and 318 KB), 10^5
executions of a root on 2,000 callpaths of which the others hold one value
each (234 KB),
and 100,000 ranks in one file (2.1 MB). Each (tree, file, step) runs in a fresh
process: ``read`` is ``tinyprof.read`` and its callpaths; ``csv`` and
``dataframe`` convert the read profile; ``show`` is ``tinyprof show``; ``loop``
and ``series`` call ``Profile.loop(c)`` and ``Profile.series(c, 0)`` for every
callpath ``c`` in turn (``--ops`` picks the steps, ``--only`` the files). A line
gives the median seconds of the step (read included) and the largest peak
RSS over the runs, or the timeout.
"""
from __future__ import annotations

import argparse
import ast
import os
import statistics
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.dirname(HERE)
CREATED = "2000-01-01T00:00:00Z"

STEP = """
import os, resource, sys, time
op, path, out, tree = sys.argv[1:5]
import tinyprof
assert tinyprof.__file__.startswith(os.path.join(tree, "")), tinyprof.__file__
t = time.perf_counter()
if op == "show":
    from tinyprof import cli
    sys.stdout = open(os.devnull, "w")
    cli.main(["show", path])
else:
    profile = tinyprof.read(path)
    len(profile.callpaths)
    if op == "csv":
        from tinyprof.converters import convert
        convert(profile, "csv", out)
    elif op == "dataframe":
        tinyprof.to_dataframe(profile)
    elif op == "loop":                  # each callpath looked up alone (issue 45)
        for c in profile.callpaths:
            profile.loop(c)
    elif op == "series":
        for c in profile.callpaths:
            profile.series(c, 0)
print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
"""


OPS = ("read", "show", "csv", "dataframe", "loop", "series")


def write(directory: str, names, parents, ids, fields, executions) -> int:
    """A one-file profile (loop 0, no metrics, one field list per rank); its size."""
    try:
        from tinyprof.format import encoding
        from tinyprof.format.output_dir import write_atomic
    except ImportError:                 # a tree from before the layers (issue 36)
        from tinyprof import _format as encoding  # type: ignore[no-redef]
        from tinyprof._layout import write_atomic  # type: ignore[no-redef]
    Header = encoding.Header
    n = len(fields)
    h = Header(name="p", nranks=n, first_rank=0, rank_count=n, executions=executions, created=CREATED)
    data = encoding.encode_file(h, names, parents, ids, [0] * len(ids), [b""] * len(ids), fields)
    os.makedirs(directory)
    write_atomic(os.path.join(directory, "p.0-of-1.tp"), data)
    return len(data)


def files(work: str) -> dict:
    """The hostile profiles: label -> (directory, bytes)."""
    made = {}
    for depth in (5000, 20000):
        d = os.path.join(work, f"deep{depth}")
        made[f"{depth} nested levels"] = d, write(d, ["a", "b", "c"], list(range(-1, depth - 1)),
                                                  [i % 3 for i in range(depth)],
                                                  [[str(depth - i).encode() for i in range(depth)]], [1])
    nexec, ncp = 100_000, 2000
    d = os.path.join(work, "executions")
    made["10^5 executions x 2,000 callpaths"] = d, write(
        d, ["r"] + [f"e{i}" for i in range(1, ncp)], [-1] + [0] * (ncp - 1), list(range(ncp)),
        [[(b"1;" * (nexec - 1) + b"5") if i == 0 else b"3" for i in range(ncp)]], [nexec])
    nranks, ncp = 100_000, 20
    d = os.path.join(work, "wide")
    made["100,000 ranks x 20 callpaths"] = d, write(
        d, [f"e{i}" for i in range(ncp)], [-1] + [0] * (ncp - 1), list(range(ncp)),
        [[b"1" if (i == 0 or r == 0) else b"" for i in range(ncp)] for r in range(nranks)], [1] * nranks)
    return made


def step(tree: str, op: str, path: str, out: str, timeout: float):
    """(seconds, peak RSS in MB) of one step in a fresh process of ``tree``; None on timeout."""
    env = dict(os.environ, PYTHONPATH=tree)
    try:
        run = subprocess.run([os.path.join(tree, ".venv", "bin", "python"), "-c", STEP, op, path, out, tree],
                             env=env, cwd=tree, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    if run.returncode:
        return run.stderr.strip().splitlines()[-1][:80]
    seconds, rss = run.stderr.split()[-2:]
    return float(seconds), int(rss) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", help="another tree with its own .venv (e.g. /work/base)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--ops", default=",".join(OPS), help=f"steps to run, of {','.join(OPS)}")
    parser.add_argument("--only", default="", help="the files whose label holds this text")
    parser.add_argument("--write", help=argparse.SUPPRESS)     # run by the writing tree's python
    args = parser.parse_args()
    if args.write:
        print(repr(files(args.write)))
        return
    trees = [("this tree", TREE)] + ([("base", os.path.abspath(args.base))] if args.base else [])
    writer = trees[-1][1]
    print("| file | bytes | step | " + " | ".join(f"{name}: s, peak MB" for name, _ in trees) + " |")
    print("| --- | ---: | --- |" + " ---: |" * len(trees))
    with tempfile.TemporaryDirectory() as work:
        made = subprocess.run([os.path.join(writer, ".venv", "bin", "python"), __file__, "--write", work],
                              env=dict(os.environ, PYTHONPATH=writer), check=True,
                              capture_output=True, text=True).stdout
        for label, (path, size) in ast.literal_eval(made).items():
            if args.only not in label:
                continue
            for op in args.ops.split(","):
                cells = []
                for _, tree in trees:
                    got = []
                    for _ in range(args.runs):      # a timeout or a failure is not tried again
                        got.append(step(tree, op, path, os.path.join(work, "out.csv"), args.timeout))
                        if not isinstance(got[-1], tuple):
                            break
                    if any(g is None for g in got):
                        cells.append(f"> {args.timeout:g} s")
                    elif any(isinstance(g, str) for g in got):
                        cells.append(next(g for g in got if isinstance(g, str)))
                    else:
                        cells.append(f"{statistics.median(g[0] for g in got):.2f} s, "
                                     f"{max(g[1] for g in got):.0f} MB")
                print(f"| {label} | {size} | {op} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
