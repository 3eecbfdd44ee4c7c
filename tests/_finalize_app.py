"""An application that finalizes MPI itself while aggregated snapshots run
(tests/runtime/test_continuous.py): ``python _finalize_app.py OUTDIR``, under mpiexec."""
import sys

from mpi4py import MPI

import tinyprof

tinyprof.Profiler("fin", frequency=0.002, outdir=sys.argv[1])   # snapshots all the time
with tinyprof.Event("main"):
    for i in range(300):
        with tinyprof.Event("step", loop=1):
            sum(range(2000))
MPI.COMM_WORLD.Barrier()
MPI.Finalize()
print("finalized", flush=True)
