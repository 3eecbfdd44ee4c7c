"""The application of tests/runtime/test_continuous.py, run under mpiexec (or alone).

    python _snapshot_app.py OUTDIR FREQUENCY KEEP STEPS MODE

Every rank runs STEPS steps (0: forever) of ``main<step``, each recording its
step number as the inconsistent metric ``it`` and meeting the others in a
barrier; rank 0 prints ``running`` after 20 steps. MODE: ``plain``;
``raise_end`` (rank 1 raises after the last step); ``raise_mid`` (rank 1
raises at step 20 while the others wait in the barrier); ``handler`` (an
application SIGTERM handler, installed first, ends the loop).
"""
import signal
import sys
import time

import tinyprof

outdir, frequency, keep, steps, mode = sys.argv[1:6]
steps = int(steps)
stop = []
if mode == "handler":
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))
try:
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
except ImportError:
    comm = None
tinyprof.Profiler("app", frequency=float(frequency), selfkeys="it:1", outdir=outdir, keep=keep)
rank = comm.Get_rank() if comm else 0
with tinyprof.Event("main"):
    i = 0
    while (steps == 0 or i < steps) and not stop:
        with tinyprof.Event("step", loop=1, it=i):
            time.sleep(0.002)
        if mode == "raise_mid" and i == 20 and rank == 1:
            raise RuntimeError("rank 1 fails")
        if comm:
            comm.Barrier()
        i += 1
        if i == 20 and rank == 0:
            print("running", flush=True)
if mode == "raise_end" and rank == 1:
    raise RuntimeError("rank 1 fails at the end")
if stop:
    print("handled", flush=True)
