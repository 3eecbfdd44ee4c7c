"""``python -m tinyprof app.py``: an unannotated script runs as under ``python``
(argv, ``__main__``, exit status) under one region named after it, with its
MPI communication recorded, on real ranks."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from test_mpi_large import MPIEXEC, needs_mpi

import tinyprof
from tinyprof.runtime import capture

APP = textwrap.dedent("""
    import sys
    import numpy as np
    from mpi4py import MPI

    def exchange(comm):
        rank, size = comm.Get_rank(), comm.Get_size()
        data = np.arange(64, dtype=np.int64)
        comm.Sendrecv(data, dest=(rank + 1) % size, recvbuf=np.empty_like(data),
                      source=(rank - 1) % size)

    if __name__ == "__main__":
        comm = MPI.COMM_WORLD
        assert sys.argv[1:] == ["--steps", "4"], sys.argv
        rows = comm.Split(comm.rank // 2, comm.rank)
        for _ in range(int(sys.argv[2])):
            exchange(comm)
            rows.Allreduce(MPI.IN_PLACE, np.ones(3))
        comm.Barrier()
        sys.exit(3 if comm.rank == 0 else 0)
""")


@needs_mpi
@pytest.mark.skipif(not os.path.exists(capture.LIBRARY), reason="libtinyprof_mpi.so not built")
@pytest.mark.parametrize("nranks", [1, 3])
def test_an_unannotated_script_under_mpiexec(tmp_path, nranks):
    app = tmp_path / "app.py"
    app.write_text(APP)
    out = tmp_path / "prof"
    proc = subprocess.run([MPIEXEC, "-n", str(nranks), sys.executable, "-m", "tinyprof",
                           "-o", str(out), str(app), "--steps", "4"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 3, proc.stdout + proc.stderr      # rank 0's exit status
    prof = tinyprof.read(out)
    assert prof.name == "app" and prof.callpaths == [("app.py",)]
    rows = {(r.callpath, r.rank, r.comm, r.op): (r.calls, r.bytes) for r in prof.mpi.itertuples()}
    for r in range(nranks):
        part = "COMM_WORLD.split1" + ("@%d" % (r // 2 * 2) if nranks > 2 else "")
        assert rows[(("app.py",), r, "COMM_WORLD", "Sendrecv")] == (4, 4 * 512)
        assert rows[(("app.py",), r, part, "Allreduce")] == (4, 4 * 24)
        assert rows[(("app.py",), r, "COMM_WORLD", "Barrier")] == (1, 0)
    expected = [[4 * 512 if j == (i + 1) % nranks else 0 for j in range(nranks)]
                for i in range(nranks)]
    assert prof.comm_matrix().tolist() == expected


def test_a_missing_script_is_a_one_line_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tinyprof", str(tmp_path / "nope.py")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == [f"python -m tinyprof: no such script: {tmp_path / 'nope.py'}"]
