"""The application of tests/runtime/test_outdir.py: one run into an output directory.

    python _outdir_app.py OUTDIR STEPS SNAPSHOTS END [KEEP] [FREQUENCY] [trace]

Runs STEPS steps of ``main<step`` (loop 1), each recording its step number as
the inconsistent metric ``it``, and takes a snapshot (``Profiler.snapshot()``,
this process's file of the next number) after each of the first SNAPSHOTS
steps. END: ``exit`` returns (the exit flush writes the profile); ``wait``
prints ``ready`` and sleeps until killed; ``flush-wait`` flushes, takes one
more snapshot, prints ``ready`` and sleeps until killed.
"""
import sys
import time

import tinyprof

outdir, steps, snapshots, end = sys.argv[1:5]
keep = sys.argv[5] if len(sys.argv) > 5 else "all"
frequency = float(sys.argv[6]) if len(sys.argv) > 6 else 0.0
trace = sys.argv[7:8] == ["trace"]
p = tinyprof.Profiler("app", selfkeys="it:1", outdir=outdir, keep=keep, frequency=frequency,
                      trace=trace)
with tinyprof.Event("main"):
    for i in range(int(steps)):
        with tinyprof.Event("step", loop=1, it=i):
            pass
        if i < int(snapshots):
            assert p.snapshot()
if end == "exit":
    sys.exit(0)
if end == "flush-wait":
    tinyprof.flush()
    assert p.snapshot()
print("ready", flush=True)
while True:
    time.sleep(1)
