"""The golden file: figure 2's program, recorded with a deterministic clock
(tests/format/test_golden.py), and the files it gave in each format version."""
from __future__ import annotations

import os
import re
import zlib

import tinyprof

Event = tinyprof.Event
GOLDEN = os.path.join(os.path.dirname(__file__), os.pardir, "golden", "fig3-v3.tp")
GOLDEN_V2 = os.path.join(os.path.dirname(__file__), os.pardir, "golden", "fig3-v2.tp")
GOLDEN_V1 = os.path.join(os.path.dirname(__file__), os.pardir, "golden", "fig3.tp")
RUN = "5f0c9e1d2a3b4c6d"


def fig2(rank: int, execution: int, clock) -> None:
    """Fig. 2: main; a 3-iteration loop (mode 1); comm summed (mode 2) with a
    consistent tag and an inconsistent mem; update on rank 1 only."""
    x = execution
    with Event("main", mem=1024 * (rank + 1) + x):
        clock.tick(5)
        for i in range(3):
            with Event("compute", loop=1):
                clock.tick(1000 * (i + 1) + 100 * rank + 10 * x)
        with Event("exchange"):
            clock.tick(50)
            for j in range(2):
                with Event("comm", loop=2, tag=2, mem=1.25 * (j + 1) * (rank + 1) + x):
                    clock.tick(200 * (j + 1) + 10 * x + rank)
        if rank == 1:
            with Event("update", is_common=False):
                clock.tick(300 + x)


def released(data: bytes) -> bytes:
    """``data`` without what a release changes: its ``version`` line, and the
    checksum over it (checked here instead), so that bumping tinyprof/_version.py
    alone leaves every golden file true."""
    body, end = data.rsplit(b"end ", 1)
    assert end == b"%08x\n" % zlib.crc32(body), "the end line is not the file's checksum"
    return re.sub(rb"^version [^\n]*\n", b"", body, count=1, flags=re.M)
