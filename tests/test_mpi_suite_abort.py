"""One rank's failure in the MPI suite ends the whole job, with the failure
shown, instead of leaving the other ranks waiting for it forever
(tests/mpi/conftest.py's pytest_runtest_makereport; issue 46)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import pytest
from helpers.tools import ROOT

ONE_RANK_FAILS = '''
def test_one_rank_fails(world):
    if world.rank == 1:
        assert world.rank == 0, "deliberate failure on rank 1"
    world.recv(source=1)        # rank 0 waits for a message rank 1 never sends


def test_after(world):
    pass
'''


def test_a_failure_on_one_rank_ends_the_job(tmp_path, mpiexec):
    shutil.copy(ROOT / "tests" / "mpi" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_fails.py").write_text(ONE_RANK_FAILS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TINYPROF")}
    proc = subprocess.Popen([mpiexec, "-n", "2", sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             "--color=no", "--with-mpi", "test_fails.py"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=300)      # a hang guard, not a timing
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"the job hung after rank 1's failure:\n{out}")
    assert proc.returncode != 0, out
    assert "deliberate failure on rank 1" in out and "test_one_rank_fails" in out, out
