"""Clock alignment across ranks for trace mode (docs/trace.md#clocks).

Each rank learns the offset of its clock to rank 0's by Cristian's
algorithm over a binomial tree: in round i, every rank r < 2^i, whose offset
is known, answers ``EXCHANGES`` pings of rank r + 2^i; the ping with the
shortest round trip gives that rank's offset to r within half that round
trip, and r's own offset and error bound are added on. log2(P) rounds, so
the error bound grows with log2(P) hops, not with P.

Imported only under MPI (it imports numpy and uses mpi4py objects).
"""
from __future__ import annotations

import time
from typing import Callable, Optional, Tuple

import numpy as np

EXCHANGES = 8
_TAG = 7401


def sync(comm, clock: Callable[[], int] = time.perf_counter_ns) -> Tuple[int, int, int]:
    """``(local, offset, error)`` in ns: rank 0's clock read ``local + offset``
    when this rank's read ``local``, within ``error``. Collective over ``comm``."""
    rank, size = comm.Get_rank(), comm.Get_size()
    offset, error = 0, 0
    ping, pong = np.zeros(1, np.int64), np.zeros(2, np.int64)
    step = 1
    while step < size:
        if rank < step and rank + step < size:          # answer a child
            child = rank + step
            for _ in range(EXCHANGES):
                comm.Recv(ping, source=child, tag=_TAG)
                pong[0] = clock()
                comm.Send(pong[:1], dest=child, tag=_TAG)
            pong[:] = offset, error
            comm.Send(pong, dest=child, tag=_TAG)
        elif step <= rank < 2 * step:                   # ask the parent
            parent = rank - step
            best_rtt: Optional[int] = None
            best = 0
            for _ in range(EXCHANGES):
                t0 = clock()
                comm.Send(ping, dest=parent, tag=_TAG)
                comm.Recv(pong[:1], source=parent, tag=_TAG)
                t1 = clock()
                if best_rtt is None or t1 - t0 < best_rtt:
                    best_rtt, best = t1 - t0, int(pong[0]) - (t0 + t1) // 2
            comm.Recv(pong, source=parent, tag=_TAG)
            assert best_rtt is not None         # EXCHANGES >= 1 pings were timed
            offset = int(pong[0]) + best
            error = int(pong[1]) + (best_rtt + 1) // 2
        step *= 2
    return clock(), offset, error
