"""Annotation semantics (paper Section IV-A) through the public API.

Every test runs with each twin of the hot path: the C core (when built) and
the pure-Python one, with an injected clock. Values are checked on the event
map itself (``recorded()``: tests/helpers/eventmap.py), which
test_the_map_reads_as_its_flush_does holds to a real flush() and read(); the
custom metrics, which the reader also checks, go through a real flush and read.
"""
from __future__ import annotations

import asyncio
import math
import sys
import textwrap
import threading
import tracemalloc
import warnings

import pytest
from helpers.eventmap import Recorded

import tinyprof
from tinyprof import annotate
from tinyprof.annotate import args as _args
from tinyprof.annotate import metrics, pyevent

impl = annotate.impl
Event = tinyprof.Event
NAN = float("nan")
TWINS = [pyevent] if annotate.impl is pyevent else [annotate.impl, pyevent]


@pytest.fixture(params=TWINS, ids=lambda twin: "python" if twin is pyevent else "c")
def hot_path(request, monkeypatch):
    """This module's tests run once per twin: ``Event``, ``tinyprof.event``,
    ``impl`` here and the runtime's ``annotate.impl`` all become that twin's."""
    twin = request.param
    twin.set_metric_keys(metrics.keys, metrics.warn_undeclared)
    for module in (annotate, tinyprof, sys.modules[__name__]):
        monkeypatch.setattr(module, "Event", twin.Event)
    monkeypatch.setattr(annotate, "impl", twin)
    monkeypatch.setattr(sys.modules[__name__], "impl", twin)
    return twin


@pytest.fixture
def recorded(hot_path):
    """``recorded()``: the event map as a flush would write it, read without one."""
    return lambda: Recorded(hot_path)


def same(a, b) -> bool:
    """Equal lists of floats, NaN equal to NaN."""
    return len(a) == len(b) and all(x == y or (x != x and y != y) for x, y in zip(a, b))


# -- callpaths, executions, loop modes ----------------------------------------

def test_the_map_reads_as_its_flush_does(clock, recorded, flush_read):
    """Every callpath, loop mode and series of a map with nesting, loop modes
    0, 1 and 2, executions without values and an event still open, read from
    the map and from the file a real flush wrote of it: the same."""
    for execution in range(3):
        with Event("main"):
            for i in range(3):
                with Event("step", loop=1):
                    clock.tick(10 + i)
                    with Event("comm", loop=2):
                        clock.tick(3 + execution)
            if execution != 1:
                with Event("io"):
                    clock.tick(7)
    still_open = Event("tail")
    still_open.__enter__()
    with Event("inner"):
        clock.tick(5)
    from_map = recorded()
    from_file = flush_read()
    still_open.__exit__(None, None, None)
    assert from_map.callpaths == from_file.callpaths and len(from_map.callpaths) == 6
    assert from_map.executions(0) == from_file.executions(0) == 3       # tail is still open
    for path in from_map.callpaths:
        assert from_map.loop(path) == from_file.loop(path), path
        assert from_map.series(path, 0) == from_file.series(path, 0), path


def test_callpaths_nest_in_preorder(clock, flush_read, assert_ns):
    with Event("main"):
        with Event("compute"):
            clock.tick(30)
        with Event("exchange"):
            clock.tick(2)
            with Event("comm"):
                clock.tick(10)
        clock.tick(5)
    p = flush_read()
    assert p.callpaths == [("main",), ("main", "compute"), ("main", "exchange"),
                           ("main", "exchange", "comm")]
    assert p.nranks == 1 and p.executions(0) == 1
    assert_ns(p, "main", [[47]])
    assert_ns(p, "main<compute", [[30]])
    assert_ns(p, "main<exchange", [[12]])
    assert_ns(p, "main<exchange<comm", [[10]])


def test_same_name_under_different_parents_is_two_callpaths(clock, recorded, assert_ns):
    with Event("main"):
        with Event("a"):
            with Event("x"):
                clock.tick(1)
        with Event("b"):
            with Event("x"):
                clock.tick(2)
    p = recorded()
    assert_ns(p, "main<a<x", [[1]])
    assert_ns(p, "main<b<x", [[2]])


def test_new_execution_only_when_first_root_is_entered_again(clock, recorded, assert_ns):
    with Event("main"):
        clock.tick(1)
    with Event("post"):         # another root event: still execution 0
        clock.tick(2)
    with Event("main"):         # the first root again: execution 1
        clock.tick(3)
    with Event("post"):
        clock.tick(4)
    with Event("post"):
        clock.tick(5)
    p = recorded()
    assert p.executions(0) == 2
    assert_ns(p, "main", [[1], [3]])
    assert_ns(p, "post", [[2], [4, 5]])


def test_event_missing_from_an_execution_has_an_empty_one(clock, recorded, assert_ns):
    for run in range(3):
        with Event("main"):
            if run == 1:
                with Event("rare"):
                    clock.tick(9)
    p = recorded()
    assert_ns(p, "main<rare", [[], [9], []])


def test_loop_modes(clock, recorded, assert_ns):
    for run in range(2):
        with Event("main"):
            for i in range(3):
                with Event("per_iteration", loop=1):
                    clock.tick(10 * run + i + 1)
            for i in range(3):
                with Event("summed", loop=2):
                    clock.tick(100 * run + i + 1)
            for i in range(2):
                with Event("plain"):
                    clock.tick(1000 + i)
    p = recorded()
    assert [p.loop(c) for c in p.callpaths[1:]] == [1, 2, 0]
    assert_ns(p, "main<per_iteration", [[1, 2, 3], [11, 12, 13]])
    assert_ns(p, "main<summed", [[6], [306]])
    assert_ns(p, "main<plain", [[1000, 1001], [1000, 1001]])


def test_bad_event_arguments_are_rejected():
    with pytest.raises(TypeError, match="name"):
        Event(3)
    with pytest.raises(ValueError, match="loop"):
        Event("x", loop=3)
    with pytest.raises(TypeError, match="numbers"):
        Event("x", mem="big")


# -- custom metrics -----------------------------------------------------------

def test_consistent_metric_first_value_wins(tmp_path, flush_read):
    tinyprof.Profiler("m", selfkeys="tag:0,mem:1", outdir=tmp_path / "m")
    with Event("main"):
        with Event("io"):
            pass
        with Event("io", tag=3):
            pass
        with Event("io", tag=4):
            pass
        with Event("quiet"):
            pass
    p = flush_read()
    assert p.value(("main", "io"), "tag") == 3
    assert p.value(("main", "quiet"), "tag") is None
    with pytest.raises(ValueError, match="consistent"):
        p.series(("main", "io"), 0, "tag")


def test_inconsistent_metric_per_occurrence_nan_where_missing(tmp_path, flush_read):
    tinyprof.Profiler("m", selfkeys="tag:0,mem:1", outdir=tmp_path / "m")
    for run in range(2):
        with Event("main", mem=100 + run):
            for i in range(3):
                kw = {} if i == 1 else {"mem": 10 * run + i + 0.5}
                with Event("step", loop=1, **kw):
                    pass
            with Event("plain"):
                pass
    p = flush_read()
    assert p.series(("main",), 0, "mem") == [[100.0], [101.0]]
    got = p.series(("main", "step"), 0, "mem")
    assert same(got[0], [0.5, NAN, 2.5]) and same(got[1], [10.5, NAN, 12.5])
    assert all(math.isnan(v) for ex in p.series(("main", "plain"), 0, "mem") for v in ex)
    with pytest.raises(ValueError, match="inconsistent"):
        p.value(("main",), "mem")


def test_inconsistent_metric_summed_in_loop_mode_2(tmp_path, flush_read):
    tinyprof.Profiler("m", selfkeys="mem:1", outdir=tmp_path / "m")
    for run in range(3):
        with Event("main"):
            for i in range(3):
                kw = {"mem": 1.5 * (i + 1)} if run != 2 and i != 1 else {}
                with Event("comm", loop=2, **kw):
                    pass
    p = flush_read()
    got = p.series(("main", "comm"), 0, "mem")
    assert got[:2] == [[6.0], [6.0]] and len(got[2]) == 1 and math.isnan(got[2][0])


def test_undeclared_metric_warns_once_and_is_not_recorded(tmp_path, flush_read):
    tinyprof.Profiler("m", selfkeys="mem:1", outdir=tmp_path / "m")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Event("main"):
            for _ in range(3):
                with Event("x", bogus=1, mem=2):
                    pass
    bogus = [w for w in caught if "'bogus'" in str(w.message)]
    assert len(bogus) == 1 and bogus[0].category is RuntimeWarning
    assert bogus[0].filename == __file__          # points at the annotated code
    p = flush_read()
    assert p.metrics == [("mem", False)]
    assert p.series(("main", "x"), 0, "mem") == [[2.0, 2.0, 2.0]]
    with pytest.raises(KeyError, match="bogus"):
        p.series(("main", "x"), 0, "bogus")
    tinyprof.Profiler("m2", selfkeys="mem:1", outdir=tmp_path / "m2")
    with pytest.warns(RuntimeWarning, match="'bogus'"):    # a new Profiler warns afresh
        with Event("x", bogus=1):
            pass


def test_bad_selfkeys_are_rejected(tmp_path):
    for bad in ("tag", "tag:2", ":0", "tag:0,tag:1", "time:1"):
        with pytest.raises(ValueError, match="tinyprof"):
            tinyprof.Profiler("m", selfkeys=bad, outdir=tmp_path / "m")


# -- decorators and recursion -------------------------------------------------

# Decorated in the test, under the twin it runs with; named at module level.
def helper(x: int) -> int:
    return 2 * x


class Solver:
    def step(self, x: int) -> int:
        return x + 1


def test_event_as_decorator(clock, recorded, assert_ns):
    @Event("solve")
    def solve(a, b=2):
        """Doc."""
        clock.tick(a + b)
        return a * b

    assert solve.__name__ == "solve" and solve.__doc__ == "Doc."
    with Event("main"):
        assert solve(3) == 6
        assert solve(1, b=1) == 1
    p = recorded()
    assert_ns(p, "main<solve", [[5, 2]])


def test_bare_event_decorator_uses_qualname_and_options(recorded, monkeypatch):
    monkeypatch.setattr(Solver, "step", tinyprof.event(loop=1)(Solver.step))
    twice = tinyprof.event(helper)
    s = Solver()
    with Event("main"):
        assert [s.step(i) for i in range(4)] == [1, 2, 3, 4]
        assert twice(2) == 4
    p = recorded()
    assert twice.__name__ == "helper"
    assert p.callpaths == [("main",), ("main", "Solver.step"), ("main", "helper")]
    assert [p.loop(c) for c in p.callpaths] == [0, 1, 0]
    assert len(p.series(("main", "Solver.step"), 0)[0]) == 4


def test_recursion_through_decorator_nests_callpaths(clock, recorded, assert_ns):
    @Event("fact")
    def fact(n: int) -> int:
        clock.tick(1)
        return 1 if n <= 1 else n * fact(n - 1)

    assert fact(3) == 6
    p = recorded()
    assert p.callpaths == [("fact",), ("fact", "fact"), ("fact", "fact", "fact")]
    assert_ns(p, "fact", [[3]])
    assert_ns(p, "fact<fact", [[2]])
    assert_ns(p, "fact<fact<fact", [[1]])


def test_event_object_reused_sequentially(clock, recorded, assert_ns):
    ev = Event("main")
    for t in (4, 5):
        with ev:
            clock.tick(t)
    assert_ns(recorded(), "main", [[4], [5]])


# -- kill switch and running without MPI -------------------------------------

def test_kill_switch_makes_everything_a_noop(tmp_path, run_python):
    proc = run_python("""
        import os, tinyprof
        tinyprof.Profiler("off", selfkeys="mem:1", outdir="out")
        with tinyprof.Event("main"):
            with tinyprof.Event("x", loop=1, mem=1):
                pass

        @tinyprof.event
        def f(x):
            return x + 1

        @tinyprof.Event("g")
        def g():
            return 7

        assert f(1) == 2 and g() == 7
        try:
            with tinyprof.Event("raises"):
                raise KeyError("through")
            raise AssertionError("the no-op swallowed the exception")
        except KeyError as e:
            assert e.args == ("through",)
        # the C core's no-op is one shared object; the pure-Python one is not
        shared = tinyprof.Event("a") is tinyprof.Event("b", loop=2)
        assert shared == hasattr(tinyprof.annotate.impl, "NullEvent"), shared
        assert tinyprof.flush() is None
        print(sorted(os.listdir(".")))
    """, cwd=tmp_path, env={"TINYPROF": "0"})
    assert proc.stdout.strip() == "[]"


_ROUNDTRIP = """
    import tinyprof
    tinyprof.Profiler("solo", selfkeys="mem:1", outdir="out")
    for run in range(2):
        with tinyprof.Event("main"):
            for i in range(3):
                with tinyprof.Event("step", loop=1, mem=i):
                    pass
    p = tinyprof.read(tinyprof.flush())
    assert p.nranks == 1 and p.executions(0) == 2, p
    assert p.callpaths == [("main",), ("main", "step")], p.callpaths
    assert p.series(("main", "step"), 0, "mem") == [[0, 1, 2], [0, 1, 2]]
    import sys
    print("ok", "mpi4py.MPI" in sys.modules)
"""


def test_works_when_mpi4py_cannot_be_imported(tmp_path, run_python):
    block = 'import sys\nsys.modules["mpi4py"] = None\n'
    proc = run_python(block + textwrap.dedent(_ROUNDTRIP), cwd=tmp_path)
    assert proc.stdout.split() == ["ok", "False"]


def test_works_with_mpi4py_installed_but_not_under_mpiexec(tmp_path, run_python):
    pytest.importorskip("mpi4py")
    proc = run_python(_ROUNDTRIP, cwd=tmp_path)
    assert proc.stdout.split()[0] == "ok"


# -- threads and asyncio ------------------------------------------------------

@pytest.fixture
def fast_switching():
    """Switch threads as often as possible, to make races likely."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def test_thread_after_reset_records_into_the_current_map(recorded):
    t = threading.Thread(target=lambda: Event("worker").__enter__().__exit__(None, None, None))
    t.start()
    t.join()
    assert list(impl.root().children) == ["worker"]
    assert recorded().callpaths == [("worker",)]


def test_threads_have_their_own_stacks_and_lose_no_values(fast_switching, recorded):
    nthreads, iterations = 4, 1000
    barrier = threading.Barrier(nthreads)
    errors = []

    def work(i):
        try:
            barrier.wait()
            with Event("worker"):
                for _ in range(iterations):
                    with Event("shared", loop=1):
                        pass
                with Event(f"t{i}"):
                    for _ in range(i + 1):
                        with Event("inner"):
                            pass
        except BaseException as e:        # pragma: no cover - reported below
            errors.append(e)

    with Event("main"):                    # threads do not inherit it: their stacks start empty
        threads = [threading.Thread(target=work, args=(i,)) for i in range(nthreads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors
    p = recorded()
    assert p.executions(0) == 1
    expected = [("main",), ("worker",), ("worker", "shared")]
    expected += [("worker", f"t{i}") for i in range(nthreads)]
    expected += [("worker", f"t{i}", "inner") for i in range(nthreads)]
    assert sorted(p.callpaths) == sorted(expected)
    count = lambda *path: sum(map(len, p.series(path, 0)))
    assert count("worker") == nthreads
    assert count("worker", "shared") == nthreads * iterations
    for i in range(nthreads):
        assert count("worker", f"t{i}") == 1
        assert count("worker", f"t{i}", "inner") == i + 1


def test_asyncio_tasks_have_their_own_stacks(recorded):
    order = []

    async def worker(name):
        with Event(name):
            order.append(name)
            await asyncio.sleep(0)
            with Event("inner"):
                await asyncio.sleep(0)
        order.append("/" + name)

    async def main():
        with Event("main"):
            await asyncio.gather(worker("a"), worker("b"), worker("c"))

    asyncio.run(main())
    assert order[:3] == ["a", "b", "c"]           # the events really interleaved
    p = recorded()
    assert p.callpaths == [("main",)] + [c for n in "abc" for c in (("main", n), ("main", n, "inner"))]
    for n in "abc":
        assert [len(ex) for ex in p.series(("main", n, "inner"), 0)] == [1]


def test_asyncio_child_task_inherits_the_callpath_it_was_created_in(recorded):
    async def child():
        with Event("child"):
            await asyncio.sleep(0)

    async def main():
        with Event("main"):
            with Event("parent"):
                await asyncio.create_task(child())
                late = asyncio.create_task(child())
            await late                            # runs after "parent" closed
            with Event("sibling"):
                pass

    asyncio.run(main())
    p = recorded()
    assert p.callpaths == [("main",), ("main", "parent"), ("main", "parent", "child"),
                           ("main", "sibling")]
    assert len(p.series(("main", "parent", "child"), 0)[0]) == 2


# -- exceptions and misuse ----------------------------------------------------

def test_exception_propagates_unchanged_and_time_is_recorded(clock, recorded, assert_ns):
    err = ValueError("boom")
    with pytest.raises(ValueError) as info:
        with Event("main"):
            with Event("inner"):
                clock.tick(3)
                raise err
    assert info.value is err
    p = recorded()
    assert_ns(p, "main", [[3]])
    assert_ns(p, "main<inner", [[3]])


def test_decorating_a_non_callable_is_a_type_error_quoting_the_name_capped(hot_path):
    """Both twins refuse it alike, and a 10 MB name makes no 10 MB message."""
    with pytest.raises(TypeError, match="tinyprof.Event 'x': can only decorate a callable, not int"):
        Event("x")(5)
    with pytest.raises(TypeError) as info:
        Event("\x1b]0;" + "n" * 10_000_000)(None)
    message = str(info.value)
    assert len(message) < 200 and "\x1b" not in message and "(10000004 characters)" in message


def test_exception_through_decorator_propagates_unchanged(tmp_path, clock, recorded, assert_ns):
    tinyprof.Profiler("m", selfkeys="mem:1", outdir=tmp_path / "m")
    err = KeyError("boom")

    @Event("decorated", mem=1)
    def fail():
        clock.tick(3)
        raise err

    with pytest.raises(KeyError) as info:
        fail()
    assert info.value is err
    assert_ns(recorded(), "decorated", [[3]])


@pytest.fixture
def warns():
    """Record warnings; the once-per-kind misuse warnings are re-armed."""
    _args.warned.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught
    _args.warned.clear()


def test_misuse_warns_once_per_kind_and_is_ignored(clock, recorded, assert_ns, warns):
    ev = Event("main")
    ev.__enter__()
    clock.tick(2)
    ev.__exit__(None, None, None)
    ev.__exit__(None, None, None)                 # exited twice
    ev.__exit__(None, None, None)
    Event("never").__exit__(None, None, None)     # exited without being entered
    with ev:
        clock.tick(1)
        assert ev.__enter__() is ev               # entered again while open
    with Event("main"):
        clock.tick(4)
    assert [(w.category, str(w.message)) for w in warns] == [
        (RuntimeWarning, "tinyprof: event 'main' exited twice; ignored (warned once)"),
        (RuntimeWarning, "tinyprof: event 'never' exited without being entered; "
                         "ignored (warned once)"),
        (RuntimeWarning, "tinyprof: event 'main' entered again while it is open; "
                         "ignored (warned once)")]
    assert {w.filename for w in warns} == {__file__}     # the application's lines
    p = recorded()
    assert p.callpaths == [("main",)]
    assert_ns(p, "main", [[2], [1], [4]])


def test_loop_true_is_loop_1():
    assert Event("x", loop=True).loop == 1
    assert Event("x", True, False).loop == 0


def test_suspended_generator_does_not_break_the_application(clock, recorded, assert_ns, warns):
    """The issue's program: "main" exits while the generator's event is open."""
    def rows():
        with Event("read_rows"):
            clock.tick(1)
            yield from range(10)

    with Event("main"):
        g = rows()
        next(g)
        clock.tick(2)
    assert impl.current() is impl.root()          # "read_rows" abandoned here
    with Event("main"):
        clock.tick(4)
        assert sum(g) == 45                       # exits "read_rows": current stays "main"
        assert impl.current().name == "main"
        with Event("after"):
            clock.tick(8)
    p = recorded()
    assert p.callpaths == [("main",), ("main", "read_rows"), ("main", "after")]
    assert_ns(p, "main", [[3], [12]])
    assert_ns(p, "main<read_rows", [[], [7]])     # entered in execution 0, exited in 1
    assert_ns(p, "main<after", [[], [8]])
    assert not warns


def test_generator_closed_later_by_the_garbage_collector(clock, recorded, assert_ns):
    def rows():
        with Event("read_rows"):
            yield 1

    with Event("main"):
        with Event("load"):
            g = rows()
            next(g)
            clock.tick(1)
        clock.tick(2)                             # "load" exited over the open "read_rows"
        assert impl.current().name == "main"
        with Event("compute"):
            clock.tick(4)
            del g                                 # GeneratorExit: "read_rows" exits here
            assert impl.current().name == "compute"
            clock.tick(8)
    p = recorded()
    assert p.callpaths == [("main",), ("main", "load"), ("main", "load", "read_rows"),
                           ("main", "compute")]
    assert_ns(p, "main", [[15]])
    assert_ns(p, "main<load", [[1]])
    assert_ns(p, "main<load<read_rows", [[7]])
    assert_ns(p, "main<compute", [[12]])


def test_generator_exhausted_in_order_closes_normally(clock, recorded, assert_ns):
    def rows():
        with Event("read_rows", loop=2):
            for i in range(3):
                clock.tick(1)
                yield i

    with Event("main"):
        for _ in rows():
            with Event("use"):                    # nested inside the open "read_rows"
                clock.tick(10)
    p = recorded()
    assert p.callpaths == [("main",), ("main", "read_rows"), ("main", "read_rows", "use")]
    assert_ns(p, "main<read_rows", [[33]])
    assert_ns(p, "main<read_rows<use", [[10, 10, 10]])


def test_tasks_with_overlapping_events(clock, recorded, assert_ns):
    async def step(name, ticks):
        with Event(name):
            clock.tick(ticks)
            await asyncio.sleep(0)
            clock.tick(ticks)

    async def main():
        with Event("main"):
            first = asyncio.create_task(step("a", 1))
            with Event("wait"):
                await asyncio.sleep(0)            # "a" enters, in the task's own context
                await first
            await asyncio.gather(step("b", 10), step("c", 100))

    asyncio.run(main())
    p = recorded()
    assert p.callpaths == [("main",), ("main", "wait"), ("main", "a"), ("main", "b"),
                           ("main", "c")]
    assert_ns(p, "main<a", [[2]])
    assert_ns(p, "main<wait", [[2]])
    assert_ns(p, "main<b", [[120]])               # b's interval spans c's first step
    assert_ns(p, "main<c", [[210]])
    assert_ns(p, "main", [[222]])


def test_async_generator_left_open_then_closed(clock, recorded, assert_ns):
    async def stream():
        with Event("stream"):
            clock.tick(1)
            yield 1
            yield 2

    async def main():
        with Event("main"):
            with Event("consume"):
                s = stream()
                assert await s.__anext__() == 1
                clock.tick(2)
            assert impl.current().name == "main"  # "consume" exited over "stream"
            with Event("other"):
                clock.tick(4)
                await s.aclose()                  # "stream" records; "other" stays current
                assert impl.current().name == "other"

    asyncio.run(main())
    p = recorded()
    assert p.callpaths == [("main",), ("main", "consume"), ("main", "consume", "stream"),
                           ("main", "other")]
    assert_ns(p, "main<consume", [[3]])
    assert_ns(p, "main<consume<stream", [[7]])
    assert_ns(p, "main<other", [[4]])
    assert_ns(p, "main", [[7]])


def test_callbacks_enter_and_exit_an_event_in_different_contexts(clock, recorded, assert_ns):
    """asyncio runs each callback in a copy of the context it was scheduled from."""
    async def main():
        loop = asyncio.get_running_loop()
        request = Event("request")
        with Event("main"):
            loop.call_soon(request.__enter__)
            await asyncio.sleep(0)                # "request" opens in the callback's copy
            assert impl.current().name == "main"
            clock.tick(5)
            loop.call_soon(request.__exit__, None, None, None)
            await asyncio.sleep(0)                # ... and records its time in another copy
            with Event("next"):
                clock.tick(1)

    asyncio.run(main())
    p = recorded()
    assert p.callpaths == [("main",), ("main", "request"), ("main", "next")]
    assert_ns(p, "main<request", [[5]])
    assert_ns(p, "main<next", [[1]])
    assert_ns(p, "main", [[6]])


def test_exit_of_an_ancestor_abandons_the_inner_events(clock, recorded, assert_ns, warns):
    a, b, c = Event("a"), Event("b"), Event("c")
    a.__enter__()
    b.__enter__()
    c.__enter__()
    clock.tick(1)
    b.__exit__(None, None, None)                  # c left open: "a" is current again
    assert impl.current().name == "a"
    with Event("d"):
        clock.tick(2)
        c.__exit__(None, None, None)              # abandoned: recorded, current unchanged
        assert impl.current().name == "d"
    a.__exit__(None, None, None)
    p = recorded()
    assert p.callpaths == [("a",), ("a", "b"), ("a", "b", "c"), ("a", "d")]
    assert_ns(p, "a", [[3]])
    assert_ns(p, "a<b", [[1]])
    assert_ns(p, "a<b<c", [[3]])
    assert_ns(p, "a<d", [[2]])
    assert impl.current() is impl.root() and not warns


def test_decorated_function_leaving_an_event_open(clock, recorded, assert_ns):
    @Event("f")
    def leaves_open():
        Event("inner").__enter__()
        clock.tick(1)

    with Event("main"):
        leaves_open()
        assert impl.current().name == "main"
    p = recorded()
    assert_ns(p, "main<f", [[1]])
    assert p.callpaths == [("main",), ("main", "f"), ("main", "f", "inner")]
    assert_ns(p, "main<f<inner", [[]])           # never exited: no value


def test_twenty_thousand_nested_levels():
    """Entering and exiting is O(1) per level, whatever the depth (issue 11)."""
    events = [Event("e") for _ in range(20_000)]
    for ev in events:
        ev.__enter__()
    assert impl.current().depth == 20_000
    for ev in reversed(events):
        ev.__exit__(None, None, None)
    assert impl.current() is impl.root()
    node, depth = impl.root(), 0
    while node.children:
        node, depth = node.children["e"], depth + 1
        assert node.count == 1
    assert depth == 20_000


def test_exiting_the_outermost_of_twenty_thousand_open_levels():
    events = [Event("e") for _ in range(20_000)]
    for ev in events:
        ev.__enter__()
    events[0].__exit__(None, None, None)          # one walk up, then all are abandoned
    assert impl.current() is impl.root()
    for ev in events[1:]:
        ev.__exit__(None, None, None)             # each finds the root at once
    assert impl.current() is impl.root()
    assert impl.root().children["e"].children["e"].count == 1


def test_flush_inside_open_events_writes_them_as_open(clock, recorded, assert_ns):
    with Event("main"):
        with Event("inner"):
            clock.tick(1)
        with Event("inner"):
            p = recorded()
            assert p.callpaths == [("main",), ("main", "inner")]
            assert_ns(p, "main", [[]])
            assert_ns(p, "main<inner", [[1]])         # the finished occurrence only
            clock.tick(2)
    assert_ns(recorded(), "main<inner", [[1, 2]])


def test_flush_twice_rewrites_with_everything_so_far(clock, recorded, assert_ns):
    with Event("main"):
        clock.tick(1)
    assert_ns(recorded(), "main", [[1]])
    with Event("main"):
        clock.tick(2)
    assert_ns(recorded(), "main", [[1], [2]])


# -- event map compactness ----------------------------------------------------

def _record(n, **values):
    with Event("main"):
        for _ in range(n):
            with Event("step", loop=1, **values):
                pass


def test_times_are_stored_in_8_bytes_per_value():
    n = 100_000
    _record(n)
    node = impl.root().children["main"].children["step"]
    times, execs = node.data()
    assert node.count == n
    assert len(times) == 8 * n and len(execs) == 16       # one (execution, index) pair


@pytest.mark.parametrize("values,per_value", [({}, 8), ({"mem": 1.5}, 16)])
def test_recording_grows_memory_by_the_stored_bytes_only(tmp_path, values, per_value):
    tinyprof.Profiler("m", selfkeys="mem:1", outdir=tmp_path / "m")
    n = 100_000
    tracemalloc.start()                            # before the buffers exist: realloc is traced
    try:
        _record(10, **values)
        before = tracemalloc.get_traced_memory()[0]
        _record(n, **values)
        growth = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # Growth slack of the typed buffers: 1/16 (array) or 1/4 (C core). A Python
    # object per value would cost 32+ bytes.
    assert growth <= per_value * n * 1.25 + 4096, growth / n
