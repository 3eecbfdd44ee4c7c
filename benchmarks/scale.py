"""The real C++ flush at scale: thousands of simulated ranks under SimGrid SMPI.

    .venv/bin/python benchmarks/scale.py [--ranks 1024,4096] [--iterations 10] [--repeats 1]
                                         [--communication-only]
    make scale

Builds ``benchmarks/scale_workload.cpp`` (the real header, the implementation
compiled in) with SimGrid's ``smpicxx`` (``apt-get install libsimgrid-dev``
when missing and run as root), then, for each P, runs it under ``smpirun``
on ``benchmarks/fattree.xml`` (512 nodes x 64 cores in a two-level fat tree,
64 ranks per node, the CPU time a rank takes charged 1:1) with MPI capture
off. Each rank records the workload's common callpaths and its non-common
ones (``variant<r % 4>`` on every rank, ``rare<r>`` on every 64th) and flushes
with ``TinyProf::flush()``; the flush's parts are timed in simulated time
(``MPI_Wtime``, max over ranks). Every output is then read back with
``tinyprof.read`` and each rank's data checked exactly (the workload's clock
is injected, so every value is known).

Prints per P: simulated time of the local part and the three phases, files,
bytes, the bytes phase 1 received (max per rank and sum over ranks: the sum
is what the one simulator process held), simulator CPU (user + system) and
max RSS; the median over ``--repeats`` runs.

Each simulated rank takes memory maps of the simulator process and an open
file (its data segment's copy): above about 8,000 ranks the kernel's default
limit of 65,530 maps (``vm.max_map_count``) is raised, as root, and the open
files' limit when it is lower than P.

``tests/native/test_scale.py`` runs the small cases with the same functions.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORKLOAD = ROOT / "benchmarks" / "scale_workload.cpp"
PROBES = ROOT / "benchmarks" / "smpi_probes.cpp"
PLATFORM = ROOT / "benchmarks" / "fattree.xml"
NODES, CORES = 512, 64       # of PLATFORM
COMPUTE = 4                  # compute/0 .. compute/3 under step
RARE_EVERY = 64              # rare<r> on every 64th rank
# SMPI's configuration (docs/scaling.md, "The configuration"). The mpich selector's allreduce,
# bcast and reduce first run Comm::init_smp on their communicator, whose ring allgather
# (P - 1 rounds, P^2 messages) costs the simulator ~P^3 CPU: those three are named.
SMPI_CONFIG = (
    "--cfg=smpi/host-speed:1Gf",            # a rank's CPU time charged 1:1
    "--cfg=smpi/coll-selector:mpich",       # its gather is cheap
    "--cfg=smpi/allreduce:rdb",             # mpich's allreduce runs Comm::init_smp (SMP set-up): ~P^3 simulator CPU
    "--cfg=smpi/bcast:binomial_tree",       # mpich's bcast does too
    "--cfg=smpi/reduce:binomial",           # and mpich's reduce (the workload's report of the phases)
    # A detached (eager) send costs SMPI 3.32 a walk of a list that grows with P when it
    # completes (CommImpl::finish): 4 allreduces at 4,096 ranks took 10.1 s of simulator
    # CPU, 3.6 s without (MPI_Init and MPI_Finalize alone: 3.3 s). Every send then waits
    # for its receive, as under a rendezvous protocol.
    "--cfg=smpi/send-is-detached-thresh:0",
    # Each rank gets a copy of the program's data segment, not of the whole program (the
    # default, dlopen): 90 MB instead of 509 MB at 1,024 ranks, so 32,768 fit.
    "--cfg=smpi/privatization:mmap",
    "--log=root.thres:warning",
)


def smpicxx() -> Tuple[Optional[str], str]:
    """SimGrid's smpicxx, installed with apt-get when missing (as root): its
    path, or None and why not."""
    found = shutil.which("smpicxx")
    if found:
        return found, ""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return None, "no smpicxx (SimGrid SMPI): apt-get install libsimgrid-dev, as root"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "libsimgrid-dev"]):
        done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            return None, f"no smpicxx, and {' '.join(cmd)} failed: {done.stderr.strip()[-300:]}"
    found = shutil.which("smpicxx")
    return (found, "") if found else (None, "libsimgrid-dev installed no smpicxx")


MAPS_PER_RANK = 8           # measured: about 7 per simulated rank, plus room


def ensure_limits(ranks: int) -> Tuple[str, Tuple[str, ...]]:
    """Raise the limits ``ranks`` simulated ranks need, when needed and
    allowed: ``vm.max_map_count`` (as root) for their memory maps, and this
    process's open files (its children inherit them), one per rank under
    ``smpi/privatization:mmap``, which keeps each rank's data segment in a file
    to map it back at every switch. Returns why not ("" if fine) and the
    settings to add: dlopen privatization when the open files cannot be had
    (a copy of the program per rank: about 0.5 MB each, no file kept open)."""
    limit_file = Path("/proc/sys/vm/max_map_count")
    need = MAPS_PER_RANK * ranks + 10_000
    try:
        if int(limit_file.read_text()) < need:
            limit_file.write_text(f"{need}\n")
    except (OSError, ValueError) as e:
        return (f"{ranks} simulated ranks need about {need:,} memory maps, more than "
                f"vm.max_map_count allows, and it could not be raised ({e}): "
                f"sysctl -w vm.max_map_count={need}"), ()
    files = ranks + 1_000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < files:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (files, max(hard, files)))
        except (OSError, ValueError) as e:
            print(f"# {ranks} ranks need {files:,} open files under smpi/privatization:mmap, more than "
                  f"the {hard:,} this process may have ({e}): smpi/privatization:dlopen instead",
                  file=sys.stderr)
            return "", ("--cfg=smpi/privatization:dlopen",)
    return "", ()


def build(compiler: str, outdir: Path, source: Path = WORKLOAD) -> Path:
    """`source` (the workload), built with `compiler` (smpicxx) and no special flag."""
    exe = outdir / source.stem
    subprocess.run([compiler, "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-I", str(ROOT / "native" / "include"),
                    str(source), "-o", str(exe)], check=True)
    return exe


def smpirun(exe: Path, ranks: int, stem: Path, args: Sequence[str], timeout: int = 3600,
            config: Tuple[str, ...] = ()) -> Tuple[subprocess.CompletedProcess, float, int]:
    """One smpirun of `exe args` at `ranks` simulated ranks, 64 per node, with
    SMPI_CONFIG then `config` (the later wins), killed after `timeout` seconds
    (exit status 124); its host file and output beside `stem`: the finished
    process (output captured), its CPU seconds and max RSS (bytes)."""
    if ranks > NODES * CORES:
        raise ValueError(f"{ranks} ranks do not fit the platform's {NODES * CORES} cores")
    problem, fallback = ensure_limits(ranks)
    if problem:
        raise RuntimeError(problem)
    hostfile = stem.parent / f"{stem.name}.hosts"
    hostfile.write_text("".join(f"node-{n}:{CORES}\n" for n in range(-(-ranks // CORES))))
    cmd = ["timeout", "-k", "10", str(timeout), "smpirun", "-np", str(ranks), "-platform", str(PLATFORM), "-hostfile", str(hostfile),
           *SMPI_CONFIG, *fallback, *config, str(exe), *args]
    env = dict(os.environ, TINYPROF_MPI="0")
    logs = stem.parent / f"{stem.name}.out", stem.parent / f"{stem.name}.err"
    with open(logs[0], "w") as out, open(logs[1], "w") as err:
        # in the run's directory: smpirun leaves its temporary host file there when killed
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=stem.parent)
        # smpirun's usage and its simulator's (waited for by it): CPU summed, RSS the largest
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    done = subprocess.CompletedProcess(cmd, proc.returncode, logs[0].read_text(),
                                       logs[1].read_text())
    return done, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024


def run(exe: Path, ranks: int, outdir: Path, iterations: int, aggregators: int = 0,
        mode: str = "timed", timeout: int = 3600, config: Tuple[str, ...] = ()
        ) -> Tuple[subprocess.CompletedProcess, float, int]:
    """The workload `exe` at `ranks` simulated ranks, its profile written to
    `outdir`: as smpirun."""
    return smpirun(exe, ranks, outdir, [str(outdir), str(iterations), str(aggregators), mode], timeout, config)


def expected(rank: int, iterations: int) -> Dict[Tuple[str, ...], List[int]]:
    """Rank `rank`'s callpaths and their values in ns (one execution), as
    scale_workload.cpp records them with its +1-per-read clock."""
    rare = rank % RARE_EVERY == 0
    steps = [2 * COMPUTE + 1] * iterations
    out: Dict[Tuple[str, ...], List[int]] = {
        ("main",): [iterations * (2 * COMPUTE + 2 + 2 + 2 + (4 if rare else 0)) + 1],
        ("main", "step"): steps,
        ("main", "halo"): [iterations],                     # loop 2: one sum per execution
        ("main", f"variant{rank % 4}"): [1] * iterations,
    }
    for k in range(COMPUTE):
        out[("main", "step", f"compute/{k}")] = [1] * iterations
    if rare:
        out[("main", f"rare{rank}")] = [3] * iterations
        out[("main", f"rare{rank}", "io")] = [1] * iterations
    return out


def check(outdir: Path, ranks: int, iterations: int, files: int) -> int:
    """Reads `outdir` with tinyprof.read and checks every rank's data exactly
    (AssertionError otherwise); the bytes of its files."""
    import tinyprof

    prof = tinyprof.read(str(outdir))
    assert prof.nranks == ranks, (prof.nranks, ranks)
    assert len(prof.files) == files, (prof.files, files)
    everything = set()
    for rank in range(ranks):
        assert prof.executions(rank) == 1, (rank, prof.executions(rank))
        everything.update(expected(rank, iterations))
    assert set(prof.callpaths) == everything, set(prof.callpaths) ^ everything
    for rank in range(ranks):
        mine = expected(rank, iterations)
        for path in prof.callpaths:
            got = [[round(v * 1e9) for v in execution] for execution in prof.series(path, rank)]
            assert got == [mine.get(path, [])], (rank, path, got, mine.get(path))
    return sum(Path(f).stat().st_size for f in prof.files)


def default_files(ranks: int, aggregators: int = 0) -> int:
    return min(ranks, aggregators) if aggregators > 0 else max(1, ranks // 16)


def probe(compiler: str, name: str, ranks: List[int], config: Tuple[str, ...]) -> None:
    """benchmarks/smpi_probes.cpp's probe `name` at each P: its output, the
    simulator's CPU and max RSS."""
    with tempfile.TemporaryDirectory(prefix="tinyprof-probe-") as tmp:
        exe = build(compiler, Path(tmp), PROBES)
        for p in ranks:
            done, cpu, rss = smpirun(exe, p, Path(tmp) / f"p{p}", [name], config=config)
            if done.returncode != 0:
                sys.exit(f"scale.py: the probe at P={p} failed ({done.returncode}):\n{done.stderr[-2000:]}")
            for line in done.stdout.splitlines():
                print(f"P={p:,} {line}")
            print(f"P={p:,} simulator CPU {cpu:.2f} s, max RSS {rss / 1e6:.0f} MB", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", default="1024,4096", help="comma-separated simulated rank counts")
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--communication-only", action="store_true",
                        help="charge no CPU time to the ranks (smpi/simulate-computation:no): "
                             "the network's part of the simulated times")
    parser.add_argument("--smpi-cfg", action="append", default=[], metavar="KEY:VALUE",
                        help="one more SMPI setting, after the harness's (repeatable)")
    parser.add_argument("--probe", choices=["dup", "charge", "allreduce"],
                        help="run benchmarks/smpi_probes.cpp instead of the workload")
    args = parser.parse_args()
    config = tuple(f"--cfg={c}" for c in args.smpi_cfg)
    if args.communication_only:
        config += ("--cfg=smpi/simulate-computation:no",)
    compiler, why = smpicxx()
    if compiler is None:
        sys.exit(f"scale.py: {why}")
    if args.probe:
        probe(compiler, args.probe, [int(p) for p in args.ranks.split(",")], config)
        return
    print("| P | local (ms) | phase 1 sync (ms) | phase 2 aggregate (ms) | phase 3 write (ms) | flush (ms) "
          "| files | bytes | phase 1 received, max / sum (B) | simulator CPU (s) | max RSS (MB) |")
    print("|" + " ---: |" * 11)
    with tempfile.TemporaryDirectory(prefix="tinyprof-scale-") as tmp:
        exe = build(compiler, Path(tmp))
        for ranks in (int(p) for p in args.ranks.split(",")):
            runs, cpus, rss = [], [], 0
            for repeat in range(args.repeats):
                outdir = Path(tmp) / f"p{ranks}-{repeat}"
                start = time.monotonic()
                done, cpu, maxrss = run(exe, ranks, outdir, args.iterations, config=config)
                if done.returncode != 0:
                    sys.exit(f"scale.py: smpirun at P={ranks} failed ({done.returncode}):\n{done.stderr[-2000:]}")
                cpus.append(cpu)
                rss = max(rss, maxrss)
                runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
                nbytes = check(outdir, ranks, args.iterations, default_files(ranks))
                print(f"# P={ranks} run {repeat}: {time.monotonic() - start:.1f} s wall, read back exactly",
                      file=sys.stderr)
                shutil.rmtree(outdir)
            med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            print(f"| {ranks:,} | {med['local'] * 1e3:.2f} | {med['sync'] * 1e3:.2f} | {med['aggregate'] * 1e3:.2f} "
                  f"| {med['write'] * 1e3:.2f} | {med['flush'] * 1e3:.2f} | {default_files(ranks)} | {nbytes:,} "
                  f"| {int(med['sync_received_max']):,} / {int(med['sync_received_sum']):,} "
                  f"| {statistics.median(cpus):.1f} | {rss / 1e6:.0f} |", flush=True)


if __name__ == "__main__":
    main()
