"""The C++ writer in an output directory an earlier run used: its keep="last"
pruning removes only its own run's files, and its snapshots are the ones read."""
from __future__ import annotations

import os
import warnings

from conftest import run
from test_programs import STEP, expected_steps

import tinyprof
from tinyprof.format import output_dir
from tinyprof.format.encoding import Header
from tinyprof.runtime import assemble as _assemble
from tinyprof.runtime.collect import LocalEvent

EARLIER = "aaaaaaaaaaaaaaaa"


def test_keep_last_prunes_only_its_own_run(build, tmp_path):
    """An earlier run left a full snapshot 5 of the same name; the C++ run
    (snapshots 1 to 4, a full one at 4 with chains of 2, then SIGKILL) must
    not take it for its newest and delete its own snapshots."""
    out = tmp_path / "out"
    directory = output_dir.snapshot_dir(str(out), 5)
    part, _ = _assemble.rank_part([LocalEvent(("main",), 0, True, [], [], {}, {}, -1, "m")],
                                  0, 1, [("it", False)])
    header = Header(name="snap", nranks=1, first_rank=0, rank_count=1, metrics=[("it", False)],
                    run=EARLIER, set_kind="snapshot", set_number=5)
    assert output_dir.write_file(directory, output_dir.set_file(directory, "snap", 0, 1),
                                 _assemble.assemble(header, [part])) is None
    run([build("tests/native/snapshot.cpp"), out, "none", "last"], check=False, TINYPROF_CHAIN="2")
    assert sorted(os.listdir(out / "snapshots")) == ["000004", "000005"]
    assert output_dir.head(output_dir.set_file(directory, "snap", 0, 1)).run == EARLIER
    p = tinyprof.read(str(out))
    assert p.run != EARLIER and p.snapshot == 4
    assert p.series(STEP, 0, "it") == expected_steps(0, 4)


def test_a_run_killed_before_writing_is_named_by_its_marker(build, tmp_path):
    """An earlier (Python) run flushed into both directories; the C++ run
    starts in the first, moves to the second, and is killed before writing:
    reading the second warns that its newest run left nothing and names the
    earlier run it returns; the first, which the C++ run left, reads quietly."""
    first, second = tmp_path / "first", tmp_path / "second"
    for out in (first, second):
        tinyprof.Profiler("app", outdir=out)
        with tinyprof.Event("main"):
            pass
        tinyprof.flush()
    earlier = tinyprof.read(str(second)).run
    run([build("tests/native/killed_early.cpp"), first, second], check=False,
        TINYPROF_RUN_ID="bbbbbbbbbbbbbbbb")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert tinyprof.read(str(second)).run == earlier
        said = [str(w.message) for w in caught]
        assert len(said) == 1 and "bbbbbbbbbbbbbbbb" in said[0] and earlier in said[0], said
        caught.clear()
        tinyprof.read(str(first))
        assert not caught, [str(w.message) for w in caught]
