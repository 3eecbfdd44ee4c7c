"""Delta snapshots read back through their chains (tinyprof/format/snapshot_chain.py), and
every way a chain can be broken gives a clear FormatError.

Files are made by the writer's own pieces (``assemble.rank_part`` and
``assemble``) from hand-built events, so every byte is known.
"""
from __future__ import annotations

import os
import zlib

import numpy as np
import pytest

import tinyprof
from tinyprof.errors import FormatError
from tinyprof.format import delta_section, output_dir, snapshot_chain
from tinyprof.format.encoding import Header, relabel
from tinyprof.runtime import assemble as _assemble
from tinyprof.runtime.collect import LocalEvent

RUN = "00000000000000ab"


def _events(n: int, late: float = 0.0):
    """One rank's events after ``n`` steps: main (open, no values) and
    main<step with its times 1..n and the newest one changed by ``late``."""
    times = np.arange(1, n + 1, dtype=np.int64)
    if n and late:
        times[-1] += int(late)
    return [LocalEvent(("main",), 0, True, np.zeros(0, np.int64), np.zeros(0, np.int64), {}, {},
                       -1, "main-node"),
            LocalEvent(("main", "step"), 1, True, times,
                       np.array([0, 0] if n else [], np.int64), {}, {}, 0, "step-node")]


def _write(outdir, k, over, parts, nranks=2):
    header = Header(name="c", nranks=nranks, first_rank=0, rank_count=len(parts),
                    run=RUN, set_kind="snapshot", set_number=k, set_base=over)
    data = _assemble.assemble(header, parts, over is not None)
    directory = output_dir.snapshot_dir(str(outdir), k)
    path = output_dir.set_file(directory, "c", 0, 1)
    assert output_dir.write_file(directory, path, data) is None
    return path


def _chain_of_three(outdir):
    """Snapshots 1 (full), 2 over 1, 3 over 2 of two ranks; returns what the
    full snapshot 3 would be, and the file of 3."""
    bases = [{}, {}]
    path = None
    for k, steps in ((1, (2, 0)), (2, (3, 1)), (3, (3, 4))):
        parts = []
        for r in range(2):
            late = 5.0 if (k, r) == (3, 0) else 0.0     # rank 0's newest occurrence changed
            part, bases[r] = _assemble.rank_part(_events(steps[r], late), r, k, [],
                                                 {} if k == 1 else bases[r])
            parts.append(part)
        path = _write(outdir, k, None if k == 1 else k - 1, parts)
    whole = [_assemble.rank_part(_events(n, 5.0 if r == 0 else 0.0), r, 3, [])[0]
             for r, n in enumerate((3, 4))]
    header = Header(name="c", nranks=2, first_rank=0, rank_count=2, run=RUN,
                    set_kind="snapshot", set_number=3)
    return _assemble.assemble(header, whole), path


def _body(data):
    return [line for line in data.split(b"\n") if not line.startswith((b"created", b"end "))]


def test_a_chain_rebuilds_the_full_snapshot_byte_for_byte(tmp_path):
    full, path = _chain_of_three(tmp_path)
    assert b"\nset snapshot 3 over 2\n" in open(path, "rb").read()
    assert _body(snapshot_chain.rebuild(path)) == _body(full)
    assert tinyprof.snapshots(tmp_path) == [1, 2, 3]
    p = tinyprof.read(tmp_path)
    assert p.snapshot == 3 and p.set == ("snapshot", 3)
    assert p.series(("main", "step"), 0) == [[1e-9, 2e-9, 8e-9], [], []]
    assert p.series(("main", "step"), 1) == [[1e-9, 2e-9, 3e-9, 4e-9], [], []]


def test_a_delta_writes_only_what_changed(tmp_path):
    _chain_of_three(tmp_path)
    rows = tinyprof.format.reader.parse_file(
        output_dir.set_file(output_dir.snapshot_dir(str(tmp_path), 3), "c", 0, 1)).sections["delta"]
    # rank 0: its newest occurrence rewritten ("1+2" kept, then "+8");
    # rank 1: from 1 step to 4 (kept "": its one occurrence was the newest).
    assert delta_section.parse(rows, "x", 1, 2, 0, 2) == [(1, 0, 3, b"+8"), (1, 1, 0, b"1+2+3+4")]


def test_a_missing_base_makes_the_snapshot_incomplete(tmp_path):
    _, path = _chain_of_three(tmp_path)
    os.remove(output_dir.set_file(output_dir.snapshot_dir(str(tmp_path), 2), "c", 0, 1))
    assert tinyprof.snapshots(tmp_path) == [1]
    assert tinyprof.read(tmp_path).snapshot == 1
    with pytest.raises(FormatError, match="delta over snapshot 2, whose file .* is missing"):
        tinyprof.read(tmp_path, snapshot=3)


def test_a_base_from_another_run_is_refused(tmp_path):
    _, path = _chain_of_three(tmp_path)
    base = output_dir.set_file(output_dir.snapshot_dir(str(tmp_path), 2), "c", 0, 1)
    data = open(base, "rb").read().replace(RUN.encode(), b"00000000000000cd")
    output_dir.write_atomic(base, relabel(data, "snapshot", 2, 1))      # checksum made right
    with pytest.raises(FormatError, match="is not the file .* is a delta over"):
        tinyprof.read(tmp_path, snapshot=3)


@pytest.mark.parametrize("line", [b"snapshot 3 over 3", b"snapshot 3 over 4", b"flush 3 over 1",
                                  b"snapshot 3 under 2", b"snapshot 3 over"])
def test_malformed_set_lines(tmp_path, line):
    _, path = _chain_of_three(tmp_path)
    data = open(path, "rb").read().replace(b"set snapshot 3 over 2", b"set " + line)
    end = data.rindex(b"\nend ") + 1
    output_dir.write_atomic(path, data[:end] + b"end %08x\n" % zlib.crc32(data[:end]))
    with pytest.raises(FormatError, match="malformed 'set' line"):
        tinyprof.format.reader.parse_file(path)


def test_a_splice_longer_than_its_base_field_is_refused(tmp_path):
    _, path = _chain_of_three(tmp_path)
    part = _assemble.RankPart(0, 3, [(-1, "main", 0, b""), (0, "step", 1, b"")], [(1, 99, b"5")])
    quiet = _assemble.RankPart(1, 3, [(-1, "main", 0, b"")], [])
    _write(tmp_path, 3, 2, [part, quiet])
    with pytest.raises(FormatError, match="keeps 99 bytes of rank 0's field on line 1, which has"):
        tinyprof.read(tmp_path, snapshot=3)


@pytest.mark.parametrize("payload, problem", [
    (b"fields 1\n0|0|0|5\nab", "exceed the bytes"),
    (b"fields 1\n0|0|0|1\nabc", "2 bytes after the last field"),
    (b"fields 2\n0|1|0|0\n0|0|0|0\n", "not sorted"),
    (b"fields 1\n7|0|0|0\n", "outside the file"),
    (b"fields 1\n0|0|0\n", "bad row"),
    (b"fields 3\n0|0|0|0\n", "fewer rows follow"),
    (b"rows 0\n", "expected 'fields <count>'"),
])
def test_bad_delta_sections(payload, problem):
    with pytest.raises(FormatError, match=problem):
        delta_section.parse(payload, "f.tp", 20, 2, 0, 2)


def test_reading_snapshots_in_turn_reuses_the_previous_rebuild(tmp_path):
    """read(snapshot=2), then 3: the second applies only 3's delta to the
    remembered fields of 2, and gives what a cold read gives."""
    full, path = _chain_of_three(tmp_path)
    snapshot_chain._recent.clear()
    tinyprof.read(tmp_path, snapshot=2)
    assert list(snapshot_chain._recent) == ["c.0-of-1.tp"]
    warm = snapshot_chain.rebuild(path)
    snapshot_chain._recent.clear()
    assert _body(warm) == _body(snapshot_chain.rebuild(path)) == _body(full)
    # A file replaced since (another run in the same directory) is not taken from memory.
    base = output_dir.set_file(output_dir.snapshot_dir(str(tmp_path), 2), "c", 0, 1)
    tinyprof.read(tmp_path, snapshot=2)
    os.remove(base)
    with pytest.raises(FormatError, match="missing"):
        tinyprof.read(tmp_path, snapshot=3)
