"""Options for the MPI launcher (``--oversubscribe`` and the like) from ``tinyprof run``
and the demo: ``--mpiexec-args``, else ``TINYPROF_MPIEXEC_ARGS`` (docs/mpi.md; issue 46).
Under the mpich wheel's mpiexec (Hydra), whose ``-genv NAME VALUE`` shows in every rank."""
from __future__ import annotations

import os
import subprocess
import sys

from helpers.mpi import needs_capture_library, needs_mpiexec
from helpers.tools import ROOT

import tinyprof


def cli(*args: str, cwd: str = ".", **extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TINYPROF")}
    env.update(extra, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300, env=env, cwd=cwd)


@needs_mpiexec
@needs_capture_library
def test_tinyprof_run_passes_options_to_the_launcher(tmp_path):
    run = ("-m", "tinyprof.cli", "run", "-n", "2", "-o", str(tmp_path / "out"))
    given = cli(*run, "--mpiexec-args=-genv TINYPROF_LAUNCHED given", "printenv", "TINYPROF_LAUNCHED")
    assert given.returncode == 0 and given.stdout.split() == ["given", "given"], given.stderr
    # the environment's, when the option is not given
    env = cli(*run, "printenv", "TINYPROF_LAUNCHED", TINYPROF_MPIEXEC_ARGS="-genv TINYPROF_LAUNCHED 'from env'")
    assert env.returncode == 0 and env.stdout.splitlines() == ["from env", "from env"], env.stderr
    bad = cli(*run, "--mpiexec-args=-genv 'X", "true")
    assert bad.returncode != 0 and "--mpiexec-args=\"-genv 'X\": No closing quotation" in bad.stderr, bad.stderr


@needs_mpiexec
@needs_capture_library
def test_the_demo_passes_options_to_the_launcher(tmp_path):
    out = tmp_path / "demo.tinyprof"
    done = cli("-m", "tinyprof.demo", "--run", "-n", "2", "--steps", "4", "--no-trace", "--snapshot-every", "0",
               "--mpiexec-args", "-genv TINYPROF_METADATA launcher=given", str(out), cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert tinyprof.read(str(out)).metadata["launcher"] == "given"
