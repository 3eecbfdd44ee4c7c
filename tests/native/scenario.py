"""Test driver: replays a scenario script with the Python annotations and an
injected clock; tests/native/scenario.cpp is its C++ twin (same usage, same
script language), and the two must write byte-identical profiles.

    python scenario.py PREFIX OUTDIR [--no-mpi]
"""
from __future__ import annotations

import sys


def main(prefix: str, outdir: str, mpi: bool) -> None:
    rank = 0
    if mpi:
        from mpi4py import MPI
        rank = MPI.COMM_WORLD.Get_rank()
    import tinyprof
    from tinyprof import annotate
    from tinyprof.format.encoding import unescape

    now = [0]
    annotate.impl.set_clock(lambda: now[0])
    profiler_args: dict = {}
    prof = None
    stack = []
    with open(f"{prefix}.{rank}.txt", encoding="utf-8") as script:
        for line in script.read().split("\n"):
            f = line.split("\t")
            if f[0] == "profiler":
                profiler_args = dict(name=unescape(f[1]), frequency=float(f[2]), selfkeys=f[3],
                                     outdir=outdir)
                prof = tinyprof.Profiler(**profiler_args)
            elif f[0] in ("aggregators", "keep"):      # a new Profiler with one more setting
                profiler_args[f[0]] = int(f[1]) if f[0] == "aggregators" else f[1]
                prof = tinyprof.Profiler(**profiler_args)
            elif f[0] == "meta":                         # the same, with one more key
                typed = {"s": unescape, "i": int, "f": float}[f[2]](f[3])
                profiler_args["metadata"] = {**profiler_args.get("metadata", {}), f[1]: typed}
                prof = tinyprof.Profiler(**profiler_args)
            elif f[0] == "enter":
                values = {}
                for item in filter(None, (s.strip() for s in f[4].split(","))):
                    key, _, value = item.rpartition(":")
                    values[key] = float(value)
                event = tinyprof.Event(unescape(f[1]), f[2] == "1", int(f[3]), **values)
                event.__enter__()
                stack.append(event)
            elif f[0] == "exit":
                stack.pop().__exit__(None, None, None)
            elif f[0] == "tick":
                now[0] += int(f[1])
            elif f[0] == "flush":
                tinyprof.flush()
            elif f[0] == "snapshot":
                if not prof.snapshot(timeout=60):
                    sys.exit(3)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], "--no-mpi" not in sys.argv[3:])
