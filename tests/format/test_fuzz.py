"""Fuzzing the reader (issue 11, item 6): mutated copies of real profiles.

Real files are written by the writer (several ranks and files, metrics of both
kinds, every loop mode, empty fields, unicode names), then thousands of
mutated copies are read. A mutated version-2 file must give a FormatError or
exactly the original data: the checksum catches what no grammar can (a digit
changed in a time). Copies whose end line is recomputed after the mutation,
and mutated version-1 files, test the grammar and the bounds instead: they
must give a FormatError or a profile whose every value can be read.

The seed is random per run (drawn in conftest.py), printed at the end of
the run and named in every failure; set TINYPROF_FUZZ_SEED to replay one.
"""
from __future__ import annotations

import dataclasses
import os
import random
import struct
import zlib
from typing import Callable, Dict, List, Tuple

import numpy as np

from tinyprof.errors import FormatError
from tinyprof.format.encoding import Header
from tinyprof.format.output_dir import file_name, write_atomic
from tinyprof.format.reader import ParsedFile, parse_file
from tinyprof.runtime import assemble
from tinyprof.runtime.collect import LocalEvent

SEED = int(os.environ.get("TINYPROF_FUZZ_SEED") or random.randrange(2**32))
STRICT_COPIES = 3000         # must read as FormatError or the original data
LOOSE_COPIES = 600           # re-checksummed or version 1: FormatError or a readable file
GOLDEN_V1 = os.path.join(os.path.dirname(__file__), os.pardir, "golden", "fig3.tp")
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


def read_all(f: ParsedFile) -> None:
    """Every value of a file that was read: no exception but FormatError allowed."""
    content(f)


def test_mutated_files_give_format_error_or_the_original(tmp_path):
    originals = real_profiles(str(tmp_path))
    expected = {p: content(parse_file(p)) for p in originals}
    blobs = {p: open(p, "rb").read() for p in originals}
    rng = random.Random(SEED)
    target = str(tmp_path / "mutant.tp")
    outcomes = {"error": 0, "same": 0}
    for i in range(STRICT_COPIES):
        source = rng.choice(originals)
        data, how = mutated(rng, blobs[source])
        where = f"TINYPROF_FUZZ_SEED={SEED}, copy {i} ({how} of {os.path.basename(source)})"
        with open(target, "wb") as f:
            f.write(data)
        try:
            got = parse_file(target)
        except FormatError as e:
            assert str(e).startswith(target), where
            outcomes["error"] += 1
            continue
        assert content(got) == expected[source], f"{where}: read different data"
        outcomes["same"] += 1
    assert outcomes["error"] > STRICT_COPIES // 2, (SEED, outcomes)


def test_mutated_files_past_the_checksum_and_version_1(tmp_path):
    originals = real_profiles(str(tmp_path))
    blobs = [open(p, "rb").read() for p in originals] + [open(GOLDEN_V1, "rb").read()]
    rng = random.Random(SEED)
    target = str(tmp_path / "mutant.tp")
    errors = 0
    for i in range(LOOSE_COPIES):
        source = rng.choice(blobs)
        data, how = mutated(rng, source)
        data = data if source.startswith(b"tinyprof 1\n") else resum(data)
        with open(target, "wb") as f:
            f.write(data)
        try:
            read_all(parse_file(target))
        except FormatError as e:
            assert str(e).startswith(target), f"TINYPROF_FUZZ_SEED={SEED}, copy {i} ({how})"
            errors += 1
    assert errors > LOOSE_COPIES // 2, SEED
