"""Hand-made and damaged profile files: hostile shapes (deep chains, many
executions), the memory a read takes, and random byte edits."""
from __future__ import annotations

import os
import random
import tracemalloc

from tinyprof.format import encoding
from tinyprof.format.encoding import Header
from tinyprof.format.output_dir import write_atomic

CREATED = "2000-01-01T00:00:00Z"


def write_file(directory, names, parents, ids, fields, executions=(1,), nranks=None) -> int:
    """A one-file profile of ``len(fields)`` ranks (loop 0, no metrics) in
    ``directory``; its size in bytes."""
    n = len(fields)
    h = Header(name="p", nranks=nranks or n, first_rank=0, rank_count=n, executions=list(executions),
               created=CREATED)
    data = encoding.encode_file(h, names, parents, ids, [0] * len(ids), [b""] * len(ids), fields)
    os.makedirs(directory, exist_ok=True)
    write_atomic(os.path.join(directory, "p.0-of-1.tp"), data)
    return len(data)


def deep_file(directory, depth: int) -> int:
    """One chain of ``depth`` nested callpaths a<b<c<a<..., line i holding depth-i."""
    return write_file(directory, ["a", "b", "c"], list(range(-1, depth - 1)), [i % 3 for i in range(depth)],
                      [[str(depth - i).encode() for i in range(depth)]])


def many_executions_file(directory, nexec: int, ncallpaths: int) -> int:
    """Rank 0 runs ``nexec`` executions (the root has a value in each, as
    every writer's root does: 1 ns, the last 5 ns); each of its
    ``ncallpaths - 1`` children has one value, in the first."""
    fields = [b"1;" * (nexec - 1) + b"5" if i == 0 else b"3" for i in range(ncallpaths)]
    return write_file(directory, ["r"] + [f"e{i}" for i in range(1, ncallpaths)],
                      [-1] + [0] * (ncallpaths - 1), list(range(ncallpaths)), [fields], [nexec])


def peak_of(work) -> tuple:
    """``work()`` and the peak of the memory Python allocated meanwhile."""
    tracemalloc.start()
    try:
        got = work()
        return got, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def corrupted(rnd: random.Random, payload: bytes, most: int) -> bytes:
    """``payload`` with 1 to ``most`` bytes changed, removed or added."""
    data = bytearray(payload)
    for _ in range(rnd.randint(1, most)):
        i = rnd.randrange(len(data))
        op = rnd.randrange(3)
        if op == 0:
            data[i] = rnd.choice(b"0123456789|\n-,:@abcAWZ_ \xff")
        elif op == 1:
            del data[i]
        else:
            data.insert(i, rnd.choice(b"0123456789|\n"))
    return bytes(data)
