"""The fuzzer of the readers (tests/format/test_fuzz.py, test_reader_parity.py):
real profiles of random shapes, their mutations, and everything a parsed file
holds. One seed per run (TINYPROF_FUZZ_SEED, printed at the end of the run)."""
from __future__ import annotations

import dataclasses
import os
import random
import struct
import zlib
from typing import Callable, Dict, List, Tuple

import numpy as np

from tinyprof.format.encoding import Header
from tinyprof.format.output_dir import file_name, write_atomic
from tinyprof.format.reader import ParsedFile
from tinyprof.runtime import assemble
from tinyprof.runtime.collect import LocalEvent

SEED = int(os.environ.get("TINYPROF_FUZZ_SEED") or random.randrange(2**32))
NAMES = ["main", "compute", "é|<+;", "\u2028x", "", "%25", "\ud800", "exchange", "comm"]
NASTY = [b"0", b"1", b"-1", b"", b" ", b"99999999999999999999", b"1000000000000", b"2*1000000000000",
         b"1_0", b"007", b"nan", b"%", b"\x00", b"\xff", b"flush 99999999999999999999", b"1e3"]


def _event(rng: random.Random, path, loop: int, nexec: int, metrics: Dict[str, bool]) -> LocalEvent:
    """One rank's values of ``path`` in some of its ``nexec`` executions."""
    times: List[int] = []
    execs: List[int] = []
    for e in range(nexec):
        if rng.random() < 0.7:
            execs += [e, len(times)]
            times += [rng.choice([0, 7, -3, 2**63 - 1, -2**63, rng.randrange(10**9)])
                      for _ in range(1 if loop == 2 else rng.randrange(1, 4))]
    columns = {k: np.array([rng.choice([0.5, -0.0, 1e300, 5e-324, np.nan, float(rng.randrange(99))])
                            for _ in times]) for k, c in metrics.items() if not c and rng.random() < 0.7}
    consistent = {k: rng.choice([2.0, -1.5, np.inf]) for k, c in metrics.items() if c and rng.random() < 0.5}
    return LocalEvent(tuple(path), loop, True, np.array(times, np.int64), np.array(execs, np.int64),
                      consistent, columns)


def real_profiles(directory: str) -> List[str]:
    """Write three profiles with the writer; their file paths."""
    rng = random.Random(1)               # the same files on every run: only mutations vary
    paths = []
    for name, nranks, nfiles, metrics in [("heat", 5, 2, {"tag": True, "mem": False, "µs/it": False}),
                                          ("solo", 1, 1, {}),
                                          ("wide", 3, 3, {"c%,:": True})]:
        tree = [(NAMES[0],)]
        for _ in range(7):
            parent = rng.choice(tree)
            child = parent + (rng.choice(NAMES),)
            if child not in tree:
                tree.insert(tree.index(parent) + 1, child)        # pre-order: right after its parent
        loops = {p: rng.randrange(3) for p in tree}
        nexecs = [rng.choice([0, 2, 3, 3]) for _ in range(nranks)]
        ranks = [[_event(rng, p, loops[p], nexecs[r], metrics) for p in tree
                  if len(p) == 1 or rng.random() < 0.8] for r in range(nranks)]
        ranks = [[e for e in evs if all(e.path[:k] in {x.path for x in evs} for k in range(1, len(e.path)))]
                 for evs in ranks]
        bounds = np.linspace(0, nranks, nfiles + 1).astype(int).tolist()
        for i in range(nfiles):
            lo, hi = bounds[i], bounds[i + 1]
            header = Header(name=name, nranks=nranks, first_rank=lo, rank_count=hi - lo, file_index=i,
                            file_count=nfiles, metrics=list(metrics.items()),
                            created="2026-01-02T03:04:05Z", run="0123456789abcdef", set_number=3)
            paths.append(os.path.join(directory, file_name(name, i, nfiles)))
            write_atomic(paths[-1], assemble.build_file(header, ranks[lo:hi], nexecs[lo:hi]))
    return paths


def _bits(values) -> Tuple[bytes, ...]:
    return tuple(b"nan" if v != v else struct.pack("<d", v) for v in values)


def content(f: ParsedFile) -> tuple:
    """Everything a reader can get from the file: header fields, callpaths, and
    per callpath its loop, consistent values and every rank's series of times and
    of each metric, per execution (doubles compared by their bits)."""
    h = f.header
    lines = []
    for path, ev in f.events.items():
        series = []
        for r in range(h.rank_count):
            base, n = int(f.exec_base[r]), h.executions[r]
            o = ev.offsets[base:base + n + 1].tolist()
            series.append([(ev.times[o[e]:o[e + 1]].tolist(),
                            [_bits(m[o[e]:o[e + 1]].tolist()) for m in ev.metrics.values()])
                           for e in range(n)])
        lines.append((path, ev.loop, sorted((k, _bits([v])) for k, v in ev.consistent.items()),
                      list(ev.metrics), series))
    return dataclasses.astuple(h), lines, f.sections


def _lines_op(op: Callable[[random.Random, List[bytes]], None]):
    def mutate(rng: random.Random, data: bytearray) -> bytearray:
        lines = bytes(data).split(b"\n")
        op(rng, lines)
        return bytearray(b"\n".join(lines))
    return mutate


def _dup(rng, lines):
    i = rng.randrange(len(lines))
    lines.insert(i, lines[i])


def _swap(rng, lines):
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    lines[i], lines[j] = lines[j], lines[i]


def _header_value(rng, lines):
    i = rng.randrange(min(13, len(lines)))
    key = lines[i].split(b" ")[0]
    lines[i] = key + b" " + rng.choice(NASTY)


def _flip(rng, data):
    data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    return data


def _digit(rng, data):
    digits = [i for i, b in enumerate(data) if 48 <= b <= 57]
    if digits:
        data[rng.choice(digits)] = rng.choice(b"0123456789")
    return data


def _insert(rng, data):
    data[rng.randrange(len(data) + 1):0] = rng.choice([bytes([rng.randrange(256)]), *NASTY])
    return data


def _delete(rng, data):
    i = rng.randrange(len(data))
    del data[i:i + rng.choice([1, 1, 2, 10])]
    return data


def _truncate(rng, data):
    return data[:rng.randrange(len(data))]


MUTATIONS = {"flip": _flip, "digit": _digit, "insert": _insert, "delete": _delete,
             "truncate": _truncate, "duplicate line": _lines_op(_dup), "swap lines": _lines_op(_swap),
             "header value": _lines_op(_header_value)}


def mutated(rng: random.Random, data: bytes) -> Tuple[bytes, str]:
    copy = bytearray(data)
    names = rng.choices(list(MUTATIONS), k=rng.choice([1, 1, 2, 3]))
    for name in names:
        if copy:
            copy = MUTATIONS[name](rng, copy)
    return bytes(copy), "+".join(names)


def resum(data: bytes) -> bytes:
    """The end line made right again (when there is one): past the checksum."""
    at = data.rfind(b"end ")
    return data if at < 0 else data[:at] + b"end %08x\n" % zlib.crc32(data[:at])
