"""Records the modules a real ``tinyprof.flush()`` runs, for test_flush_flow.py.

``python record_flush.py OUTDIR serial|mpi JSON``, under ``mpiexec -n N`` for
``mpi``: profiles one event (an allreduce inside it with ``mpi``), flushes
under ``sys.setprofile`` and writes to JSON (one file per rank, ``JSON.<rank>``)
each call that enters a tinyprof module from another one, as [caller module,
caller function, callee module, callee function]. Code that runs while a
module is first imported (the flush imports its parts lazily) is not the
flow, and is left out.
"""
import json
import sys

import tinyprof


def _module(frame) -> str:
    return frame.f_globals.get("__name__", "")


def _importing(frame) -> bool:
    """Whether ``frame`` runs below a tinyprof module's first import."""
    while frame is not None:
        if frame.f_code.co_name == "<module>" and _module(frame).startswith("tinyprof."):
            return True
        frame = frame.f_back
    return False


def main(outdir: str, mode: str, out: str) -> None:
    mpi = mode == "mpi"
    tinyprof.Profiler("flow", outdir=outdir, mpi=mpi)
    rank = 0
    with tinyprof.Event("work"):
        if mpi:
            from mpi4py import MPI
            rank = MPI.COMM_WORLD.rank
            MPI.COMM_WORLD.allreduce(1)
    calls = []

    def record(frame, event, arg):
        if event != "call" or not _module(frame).startswith("tinyprof."):
            return
        caller = frame.f_back
        while caller is not None and not (_module(caller).startswith("tinyprof.")
                                          or _module(caller) == "__main__"):
            caller = caller.f_back      # through the standard library (dataclasses, contextlib...)
        if caller is None or _module(caller) == _module(frame) or _importing(frame):
            return
        row = [_module(caller), caller.f_code.co_qualname, _module(frame), frame.f_code.co_qualname]
        if row not in calls:
            calls.append(row)

    sys.setprofile(record)
    try:
        tinyprof.flush()
    finally:
        sys.setprofile(None)
    with open(f"{out}.{rank}", "w") as f:
        json.dump(calls, f, indent=0)


if __name__ == "__main__":
    main(*sys.argv[1:4])
