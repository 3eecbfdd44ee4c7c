"""Checks of the POP metrics of a real run of the compute-then-sync program
(tests/_pop_app.py in Python, tests/native/pop.cpp in C++): rank r of P
computes (1 + r/(P-1)) units (a sleep), then meets the others in a barrier;
``growing``: 4 steps, in step k (1 + k r/(P-1)) units, a snapshot after each;
traced, ``pipeline`` (a token passed on, each rank computing a unit with it)
and ``transfer`` (balanced ranks exchanging 8 x 16 MB on a ring).

Sleeps overshoot by a few ms on a loaded machine: the load balances are
checked within the issue's tolerance, never a duration. The exact values of
the metrics on profiles with known times are in tests/analysis/test_pop.py.

Used by tests/analysis/test_pop.py and tests/native/test_pop.py.
"""
from __future__ import annotations

from typing import List

import pytest

import tinyprof

TOLERANCE = 0.06
MAIN, SYNC, STEP = ("main",), ("main", "sync"), ("main", "step")


def only_barriers_below_main(profile) -> List[str]:
    """tinyprof's own MPI calls (its Dup, the flush's and the snapshots'
    collectives) are not captured: below main there is only the program's barrier."""
    ops = {(r.callpath[-1], r.op) for r in profile.mpi.itertuples() if r.callpath[:1] == MAIN}
    return [] if ops == {("sync", "Barrier")} else [f"MPI calls below main: {ops}"]


def balance(profile, nranks: int) -> List[str]:
    """main's load balance is 0.75, its communication efficiency near 1, the
    parallel efficiency their product; the barrier is communication inefficiency."""
    frame = profile.pop()
    row = {p: r for p, r in zip(frame["callpath"], frame.itertuples())}
    main, sync = row[MAIN], row[SYNC]
    errors = only_barriers_below_main(profile)
    if main.ranks != nranks or abs(main.load_balance - 0.75) > TOLERANCE:
        errors.append(f"main: {main}")
    if main.communication_efficiency < 0.9:
        errors.append(f"main's communication efficiency: {main}")
    if main.parallel_efficiency != pytest.approx(main.load_balance * main.communication_efficiency,
                                                 rel=1e-12):
        errors.append(f"main's parallel efficiency: {main}")
    if sync.communication_efficiency >= 0.1:
        errors.append(f"sync: {sync}")
    return errors


def growing(outdir) -> List[str]:
    """Per snapshot interval, the step's load balance (1 + k/2) / (1 + k)."""
    if tinyprof.snapshots(outdir) != [1, 2, 3, 4]:
        return [f"snapshots {tinyprof.snapshots(outdir)}"]
    frame = tinyprof.pop_history(outdir)
    step = frame[[p == STEP for p in frame["callpath"]]]
    errors = only_barriers_below_main(tinyprof.read(outdir))
    if list(step["snapshot"]) != [1, 2, 3, 4]:
        errors.append(f"intervals of main<step: {list(step['snapshot'])}")
    got = list(step["load_balance"])
    if any(abs(g - w) > TOLERANCE for g, w in zip(got, [1.0, 0.75, 2 / 3, 0.625])) or \
            got[0] - got[-1] < 0.25:
        errors.append(f"load balance per interval: {got}")
    # (ranks leave a snapshot at different times: the early ones wait longer in the
    # next barrier, so the step's communication efficiency is not checked)
    if list(step["parallel_efficiency"]) != pytest.approx(
            list(step["load_balance"] * step["communication_efficiency"]), rel=1e-12):
        errors.append(f"parallel efficiency per interval: {step}")
    # main is open at every snapshot: each interval holds the time of what
    # closed inside it, its steps (its own time counts when it closes)
    main = frame[[p == MAIN for p in frame["callpath"]]]
    if list(main["snapshot"]) != [1, 2, 3, 4] or list(main["runtime"]) != list(step["runtime"]):
        errors.append(f"main per interval: {main}")
    return errors


def split_product(row) -> List[str]:
    """Serialization x transfer efficiency is the communication efficiency."""
    if row.serialization_efficiency * row.transfer_efficiency != pytest.approx(
            row.communication_efficiency, rel=1e-12):
        return [f"ser eff x trf eff != comm eff: {row}"]
    return []


def _main_split(profile):
    frame = profile.pop(trace=True)
    return next(r for p, r in zip(frame["callpath"], frame.itertuples()) if p == MAIN)


def pipeline(profile) -> List[str]:
    """A token pipeline over 4 ranks waits for nothing but the token:
    main's serialization efficiency 1/4, transfer efficiency 1."""
    row = _main_split(profile)
    errors = split_product(row)
    if abs(row.serialization_efficiency - 0.25) > TOLERANCE or row.transfer_efficiency < 0.95:
        errors.append(f"pipeline: {row}")
    return errors


def transfer(profile) -> List[str]:
    """Balanced ranks exchanging large messages lose to transfer, not to serialization."""
    row = _main_split(profile)
    errors = split_product(row)
    if not (row.serialization_efficiency >= 0.9 and row.transfer_efficiency <= 0.95 and
            row.transfer_efficiency < row.serialization_efficiency):
        errors.append(f"transfer: {row}")
    return errors
