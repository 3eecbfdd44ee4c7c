"""An application that finalizes MPI itself while aggregated snapshots run
(tests/runtime/test_continuous.py), then records more:
``python _finalize_app.py OUTDIR FREQUENCY MODE``, under mpiexec. MODE: ``plain``;
``trace``; ``late`` (rank 1 records ten times more, so reaches MPI_Finalize last)."""
import sys

from mpi4py import MPI

import tinyprof

profiler = tinyprof.Profiler("fin", frequency=float(sys.argv[2]), outdir=sys.argv[1],
                             trace=sys.argv[3] == "trace")
late = sys.argv[3] == "late" and MPI.COMM_WORLD.Get_rank() == 1
with tinyprof.Event("main"):
    for i in range(3000 if late else 300):
        with tinyprof.Event("step", loop=1):
            sum(range(2000))
        if i == 100:
            assert profiler.snapshot(60)        # every rank asks: it completes at once
if sys.argv[3] != "late":
    MPI.COMM_WORLD.Barrier()
MPI.Finalize()
with tinyprof.Event("after"):       # recorded after MPI_Finalize: written at exit
    pass
print("finalized", flush=True)
