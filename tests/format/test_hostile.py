"""Hostile file shapes (issue 34): deep nesting, many declared executions, huge
rank counts. Reading stays in time and memory linear in the file's size: the
memory is asserted (tracemalloc's peak against the file's bytes), the time
only follows from it (the old code took minutes or gigabytes here)."""
from __future__ import annotations

import os
import pickle
import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

import tinyprof
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


def test_deep_nesting_reads_in_memory_linear_in_the_file(tmp_path):
    """20,000 nested levels in 320 KB: the callpaths as tuples held 2·10^8
    names (1.6 GB); as Callpaths each holds its parent."""
    depth = 20_000
    size = deep_file(tmp_path, depth)

    def work():
        profile = tinyprof.read(tmp_path)
        return profile, [profile.series(p, 0) for p in profile.callpaths[::997]]
    (profile, series), peak = peak_of(work)
    assert peak < 200 * size
    assert len(profile.callpaths) == depth
    assert series == [[[(depth - i) / 1e9]] for i in range(0, depth, 997)]
    deepest = profile.callpaths[-1]
    assert len(deepest) == depth and deepest[-1] == "abc"[(depth - 1) % 3]
    assert deepest == tuple("abc"[i % 3] for i in range(depth))
    assert deepest[:-1] is profile.callpaths[-2]
    assert profile.series(tuple(deepest), 0) == [[1e-9]]


def test_files_of_a_profile_share_their_callpaths(tmp_path):
    for rank in range(2):
        h = Header(name="p", nranks=2, first_rank=rank, rank_count=1, file_index=rank, file_count=2,
                   executions=[1], created=CREATED)
        data = encoding.encode_file(h, ["m", "x", "y"], [-1, 0, 1], [0, 1, 2], [0] * 3, [b""] * 3,
                                    [[b"5", b"2", b"%d" % (rank + 1)]])
        write_atomic(os.path.join(tmp_path, f"p.{rank}-of-2.tp"), data)
    profile = tinyprof.read(tmp_path)
    a, b = profile.parsed
    assert all(x is y for x, y in zip(a.paths, b.paths))
    assert profile.callpaths == [("m",), ("m", "x"), ("m", "x", "y")]
    assert profile.series(("m", "x", "y"), 1) == [[2e-9]]


def test_a_shallow_file_and_a_deep_one_make_one_profile(tmp_path):
    """Ordinary files keep tuples; a deep one's Callpaths join them."""
    depth = 3000
    for rank, n in ((0, 2), (1, depth)):
        h = Header(name="p", nranks=2, first_rank=rank, rank_count=1, file_index=rank, file_count=2,
                   executions=[1], created=CREATED)
        data = encoding.encode_file(h, ["a", "b", "c"], list(range(-1, n - 1)), [i % 3 for i in range(n)],
                                    [0] * n, [b""] * n, [[b"%d" % (i + 1) for i in range(n)]])
        write_atomic(os.path.join(tmp_path, f"p.{rank}-of-2.tp"), data)
    profile = tinyprof.read(tmp_path)
    assert type(profile.callpaths[0]) is tuple and type(profile.callpaths[-1]) is not tuple
    assert len(profile.callpaths) == depth and profile.callpaths[:2] == [("a",), ("a", "b")]
    assert profile.series(("a", "b"), 0) == [[2e-9]] and profile.series(("a", "b"), 1) == [[2e-9]]
    assert profile.series(profile.callpaths[-1], 1) == [[depth / 1e9]]
    assert profile.series(profile.callpaths[-1], 0) == [[]]


NAMES = st.lists(st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=4)
                 | st.sampled_from(["", "a", "\udcff", "x<y"]), min_size=1, max_size=6)


@settings(max_examples=200, deadline=None)
@given(NAMES, NAMES)
def test_callpath_acts_as_the_tuple_of_its_names(names, other):
    from tinyprof.format.reader import Callpath
    path = None
    for name in names:
        path = Callpath(path, name)
    t = tuple(names)
    assert path == t and t == path and not path != t
    assert hash(path) == hash(t) and {t: 1}[path] == 1 and {path: 1}[t] == 1
    assert (len(path), list(path), path[0], path[-1], path[1:]) == (len(t), names, t[0], t[-1], t[1:])
    assert path[:-1] == t[:-1] and path + ("z",) == t + ("z",) and ("z",) + path == ("z",) + t
    assert repr(path) == repr(t) and pickle.loads(pickle.dumps(path)) == t
    assert (list(reversed(path)), names[0] in path, path.index(names[-1]), path.count(names[0])) == (
        list(reversed(t)), True, t.index(names[-1]), t.count(names[0]))
    o = tuple(other)
    assert (path < o, path <= o, path > o, path >= o, path == o) == (t < o, t <= o, t > o, t >= o, t == o)
    copy = None
    for name in other:
        copy = Callpath(copy, name)
    assert (path == copy) == (t == o) and sorted([copy, path]) == sorted([o, t])
