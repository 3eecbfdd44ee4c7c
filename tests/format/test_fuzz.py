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

import os
import random

from helpers.fuzz import SEED, content, mutated, real_profiles, resum

from tinyprof.errors import FormatError
from tinyprof.format.reader import ParsedFile, parse_file

STRICT_COPIES = 3000         # must read as FormatError or the original data
LOOSE_COPIES = 600           # re-checksummed or version 1: FormatError or a readable file
GOLDEN_V1 = os.path.join(os.path.dirname(__file__), os.pardir, "golden", "fig3.tp")


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
