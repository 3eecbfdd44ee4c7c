"""Whole runs for the comparison tests (tests/analysis/test_compare.py): one
file of ``nranks`` ranks, with seeded jitter, ``solve`` as slow as asked."""
from __future__ import annotations

import os

import numpy as np

import tinyprof
from tinyprof import annotate
from tinyprof.format import encoding as _format
from tinyprof.format import output_dir
from tinyprof.runtime import assemble
from tinyprof.runtime import collect as _collect

impl = annotate.impl
Event = tinyprof.Event
NRANKS, STEPS = 4, 5
MAIN, COMPUTE, SOLVE, WAIT = ("main",), ("main", "compute"), ("main", "solve"), ("main", "wait")
MS = 1_000_000


def write_run(outdir, clock, seed: int, slow: float = 1.0, nranks: int = NRANKS, extra: bool = False,
              name: str = "app", shift: float = 1.0) -> str:
    """One run on ``nranks`` ranks, ``solve`` ``slow`` times as long; ``extra``:
    rank 0 also enters ``main<io``; ``shift``: every duration that many times
    as long (a whole run on a loaded machine). Returns the output directory."""
    rng = np.random.default_rng(seed)
    jitter = lambda: shift * (1 + rng.uniform(-0.02, 0.02, (nranks, STEPS)))
    compute = 20 * MS * (1 + 0.1 * np.arange(nranks))[:, None] * jitter()
    solve = 10 * MS * slow * jitter()
    busy = compute + solve
    wait = busy.max(axis=0) - busy + shift * rng.uniform(0, 2 * MS, (nranks, STEPS))   # the machine's jitter
    ranks, executions = [], []
    for r in range(nranks):
        impl.reset()
        with Event("main"):
            clock.tick(int(shift * MS))
            for step in range(STEPS):
                for region, ns in (("compute", compute), ("solve", solve), ("wait", wait)):
                    with Event(region, loop=1):
                        clock.tick(int(ns[r, step]))
            if extra and r == 0:
                with Event("io", is_common=False):
                    clock.tick(3 * MS)
        ranks.append(_collect.collect(impl.root()))
        executions.append(impl.executions())
    impl.reset()
    os.makedirs(outdir, exist_ok=True)
    header = _format.Header(name=name, nranks=nranks, first_rank=0, rank_count=nranks,
                            file_index=0, file_count=1, metrics=[])
    output_dir.write_atomic(os.path.join(outdir, output_dir.file_name(name, 0, 1)),
                        assemble.build_file(header, ranks, executions))
    return str(outdir)
