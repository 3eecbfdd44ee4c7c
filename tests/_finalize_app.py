"""An application that finalizes MPI itself while aggregated snapshots run
(tests/runtime/test_continuous.py), then records more:
``python _finalize_app.py OUTDIR FREQUENCY [trace]``, under mpiexec."""
import sys

from mpi4py import MPI

import tinyprof

profiler = tinyprof.Profiler("fin", frequency=float(sys.argv[2]), outdir=sys.argv[1],
                             trace=sys.argv[3:] == ["trace"])
with tinyprof.Event("main"):
    for i in range(300):
        with tinyprof.Event("step", loop=1):
            sum(range(2000))
        if i == 100:
            assert profiler.snapshot(60)        # every rank asks: it completes at once
MPI.COMM_WORLD.Barrier()
MPI.Finalize()
with tinyprof.Event("after"):       # recorded after MPI_Finalize: written at exit
    pass
print("finalized", flush=True)
