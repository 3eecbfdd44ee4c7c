"""Tests of the C hot path ``tinyprof.annotate._core`` against the reference ``pyevent``.

The same event programs run on both implementations with the same injected
clock and must leave identical event maps. The general annotation tests are in
test_annotate.py (run with each implementation); these are about the C module:
its choice, its parity, its fast ContextVar path, errors, references, memory.
"""
import ast
import asyncio
import contextlib
import contextvars
import functools
import gc
import itertools
import math
import os
import sys
import sysconfig
import threading
import tracemalloc
import warnings
import weakref
from array import array
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinyprof import annotate
from tinyprof.annotate import metrics as _eventmap
from tinyprof.annotate import pyevent

core = pytest.importorskip("tinyprof.annotate._core", reason="the C core was not built")
pure = pyevent
BOTH = [core, pure]


class Boom(Exception):
    pass


@pytest.fixture(autouse=True)
def fresh_maps():
    """Empty event maps and the real clock around every test."""
    for mod in BOTH:
        mod.reset()
        mod.set_metric_keys(_eventmap.keys, _eventmap.warn_undeclared)
    yield
    for mod in BOTH:
        mod.set_clock(None)
        mod.reset()
    _eventmap.configure([])


def fake_clock():
    """A deterministic clock with uneven steps (catches start/end mix-ups)."""
    ticks = itertools.accumulate(itertools.cycle([3, 7, 1, 12, 5, 2]))
    return lambda: next(ticks)


def dump(mod):
    """Everything recorded, as plain values: one tuple per callpath, pre-order."""
    out = []

    def walk(node, path):
        for name, child in node.children.items():
            assert child.name == name and child.parent is node
            times, execs = (array("q", raw).tolist() for raw in child.data())
            metrics = {k: [None if math.isnan(v) else v for v in array("d", bytes(col))]
                       for k, col in (child.metrics or {}).items()}
            out.append((path + (name,), child.loop, child.common, child.last_exec,
                        child.count, times, execs, child.consistent, metrics))
            walk(child, path + (name,))

    walk(mod.root(), ())
    return out, mod.executions()


def decorate(mod, name, fn, **options):
    """The C decorator; for the reference, the ``with`` it must behave like."""
    if mod is core:
        return core.Event(name, **options)(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with pure.Event(name, **options):
            return fn(*args, **kwargs)
    return wrapper


def on_both(program, *args):
    """Run program(mod, *args) on each implementation with the fake clock."""
    results = []
    for mod in BOTH:
        mod.set_clock(fake_clock())
        program(mod, *args)
        mod.set_clock(None)
        results.append(dump(mod))
    assert results[0] == results[1]
    return results[0]


# ---- which implementation ---------------------------------------------------

def test_core_is_the_implementation_when_built():
    if os.environ.get("TINYPROF_PURE", "") not in ("", "0"):
        assert annotate.impl is pure
    else:
        assert annotate.impl is core
        if annotate.ENABLED:
            assert annotate.Event is core.Event


def test_fast_context_path_is_on_where_checked():
    expected = ((3, 9) <= sys.version_info[:2] <= (3, 13) and sys.implementation.name == "cpython"
                and not sysconfig.get_config_var("Py_GIL_DISABLED"))
    assert core._fast_context is expected


# ---- parity with the reference -----------------------------------------------

def test_loops_executions_and_roots():
    def program(m):
        for _ in range(3):
            with m.Event("main"):
                for i in range(4):
                    with m.Event("compute", loop=1):
                        with m.Event("kernel", is_common=False):
                            pass
                    with m.Event("exchange", loop=2):
                        pass
                    with m.Event("exchange", loop=2):
                        pass
            with m.Event("other_root"):
                with m.Event("main"):
                    pass
    tree, executions = on_both(program)
    assert executions == 3
    paths = [entry[0] for entry in tree]
    assert paths[:4] == [("main",), ("main", "compute"), ("main", "compute", "kernel"),
                         ("main", "exchange")]
    exchange = tree[3]
    assert exchange[4] == 3 and exchange[6] == [0, 0, 1, 1, 2, 2]   # loop 2: one value per execution


def test_exceptions_are_recorded_and_propagate():
    def program(m):
        with m.Event("main"):
            for _ in range(2):
                with pytest.raises(Boom):
                    with m.Event("fails"):
                        with m.Event("deep"):
                            raise Boom
    tree, _ = on_both(program)
    assert [(e[0], e[4]) for e in tree] == [(("main",), 1), (("main", "fails"), 2),
                                           (("main", "fails", "deep"), 2)]


def test_exit_returns_none_and_does_not_swallow():
    e = core.Event("x")
    assert e.__enter__() is e
    assert e.__exit__(Boom, Boom(), None) is None


def test_recursive_decorator_nests_callpaths():
    def program(m):
        @functools.partial(decorate, m, "f")
        def f(n):
            return f(n - 1) + 1 if n else 0
        with m.Event("main"):
            assert f(3) == 3
            assert f(1) == 1
    tree, _ = on_both(program)
    assert [(e[0], e[4]) for e in tree] == [
        (("main",), 1), (("main", "f"), 2), (("main", "f", "f"), 2),
        (("main", "f", "f", "f"), 1), (("main", "f", "f", "f", "f"), 1)]


def test_decorator_exception_and_options():
    def program(m):
        def g(x, *, y):
            if x < 0:
                raise Boom
            return x + y
        g = decorate(m, "g", g, loop=2, is_common=False)
        with m.Event("main"):
            assert g(1, y=2) == 3
            with pytest.raises(Boom):
                g(-1, y=0)
    tree, _ = on_both(program)
    assert tree[1][:5] == (("main", "g"), 2, False, 0, 1)


statement = st.recursive(
    st.tuples(st.sampled_from("abc"), st.sampled_from([0, 1, 2]), st.booleans(),
              st.just(()), st.booleans()),
    lambda body: st.tuples(st.sampled_from("abc"), st.sampled_from([0, 1, 2]), st.booleans(),
                           st.lists(body, max_size=3).map(tuple), st.booleans()),
    max_leaves=12)


def run_statement(m, stmt):
    name, loop, raises, body, as_decorator = stmt

    def region():
        for inner in body:
            run_statement(m, inner)
        if raises:
            raise Boom
    if as_decorator:
        decorate(m, name, region, loop=loop)()
    else:
        with m.Event(name, loop=loop):
            region()


def run_program(m, program):
    for stmt in program:
        try:
            run_statement(m, stmt)
        except Boom:
            pass


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(statement, max_size=6))
def test_random_programs_match_reference(program):
    for mod in BOTH:
        mod.reset()
    on_both(run_program, program)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(statement, max_size=6))
def test_random_programs_match_reference_with_other_context_variables(program):
    """Another ContextVar changing inside events: the fast path must give way."""
    other = contextvars.ContextVar("other")

    def noisy(m, program):
        for i, stmt in enumerate(program):
            other.set(i)
            try:
                run_statement(m, stmt)
            except Boom:
                pass
    for mod in BOTH:
        mod.reset()
    on_both(lambda m: contextvars.copy_context().run(noisy, m, program))


def test_other_variable_set_inside_an_event():
    other = contextvars.ContextVar("other")

    def program(m):
        for i in range(3):
            with m.Event("main"):
                with m.Event("a"):
                    other.set(i)           # changes the map under the open event
                    with m.Event("b"):
                        pass
                assert m.current().name == "main" and other.get() == i
                with m.Event("a"):         # entered from a map seen before
                    pass
    contextvars.copy_context().run(on_both, program)


def test_other_context_variables_are_left_alone():
    other = contextvars.ContextVar("other")

    def truth():        # the context's map itself, not ContextVar.get's cache
        return contextvars.copy_context().get(other)

    def program():
        for i in range(4):
            other.set(i)                   # a new map before each entry
            with core.Event("x"):
                assert truth() == i and core.current().name == "x"
                if i % 2:
                    other.set(-i)          # and one under the open event
            assert truth() == (-i if i % 2 else i) and core.current() is core.root()
    contextvars.copy_context().run(program)
    assert core.root().children["x"].count == 4


def test_a_context_left_at_an_old_root_continues_at_the_new_one():
    ctx = contextvars.copy_context()       # at the root the fixture's reset() made
    core.reset()

    def inside():
        assert core.current() is core.root()
        with core.Event("x"):
            pass
    ctx.run(inside)
    assert core.root().children["x"].count == 1 and core.executions() == 1


def test_metric_values_and_hook():
    _eventmap.configure([("tag", True), ("mem", False)])

    def program(m):
        with m.Event("main"):
            for i in range(3):
                with m.Event("io", tag=7, mem=i):
                    pass
                with m.Event("sum", loop=2, mem=1.5):
                    pass
    tree, _ = on_both(program)
    io = tree[1]
    assert io[7] == {"tag": 7.0} and io[8] == {"mem": [0.0, 1.0, 2.0]}


def test_keys_declared_later_are_read_as_they_change():
    """The hot path holds tinyprof.annotate.metrics's dict itself: configure() reaches it."""
    with pytest.warns(RuntimeWarning, match="metric 'a' .* is not declared"):
        with core.Event("x", a=1):
            pass
    _eventmap.configure([("a", False)])
    with core.Event("x", a=2):
        pass
    assert array("d", bytes(core.root().children["x"].metrics["a"])).tolist()[1] == 2.0
    assert math.isnan(array("d", bytes(core.root().children["x"].metrics["a"]))[0])


# ---- contexts: threads, asyncio, copies ---------------------------------------

def test_asyncio_tasks_start_where_they_were_created():
    async def work(m, i):
        with m.Event("work"):
            await asyncio.sleep(0)
            with m.Event("step"):
                await asyncio.sleep(0)

    async def main(m):
        with m.Event("main"):
            with m.Event("spawn"):
                tasks = [asyncio.ensure_future(work(m, i)) for i in range(3)]
            await asyncio.gather(*tasks)    # the tasks run after "spawn" is left
            assert m.current().name == "main"

    tree, _ = on_both(lambda m: asyncio.run(main(m)))
    assert [(e[0], e[4]) for e in tree] == [
        (("main",), 1), (("main", "spawn"), 1), (("main", "spawn", "work"), 3),
        (("main", "spawn", "work", "step"), 3)]


def test_copied_context_sees_the_open_event_and_keeps_its_own():
    with core.Event("a"):
        ctx = contextvars.copy_context()
    assert core.current() is core.root()

    def inside():
        assert core.current().name == "a"
        with core.Event("b"):
            assert core.current().name == "b"
        return core.current()
    assert ctx.run(inside).name == "a"
    assert core.current() is core.root()
    assert core.root().children["a"].children["b"].count == 1


def test_threads_have_their_own_stacks():
    barrier = threading.Barrier(4)
    errors = []

    def worker():
        try:
            assert core.current() is core.root()    # a new thread starts at the root
            barrier.wait()
            for _ in range(500):
                with core.Event("t"):
                    with core.Event("u"):
                        assert core.current().name == "u"
        except Exception as exc:         # reported below, not lost in the thread
            errors.append(exc)

    with core.Event("main"):
        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    t = core.root().children["t"]
    assert t.count == 2000 and t.children["u"].count == 2000
    assert core.root().children["main"].children == {}


def test_new_thread_after_reset_starts_at_the_new_root():
    with core.Event("old"):
        pass
    core.reset()
    found = []
    thread = threading.Thread(target=lambda: found.append(core.current()))
    thread.start()
    thread.join()
    assert found == [core.root()]


# ---- errors --------------------------------------------------------------------

def error_of(fn):
    try:
        fn()
    except Exception as exc:
        return type(exc), str(exc)
    raise AssertionError("no error")


@pytest.mark.parametrize("make", [
    lambda m: m.Event(3),
    lambda m: m.Event(b"x"),
    lambda m: m.Event("x", loop=3),
    lambda m: m.Event("x", loop="1"),
    lambda m: m.Event("x", mem="lots"),
    lambda m: m.Event("x", mem=None, tag=1),
])
def test_construction_errors_match(make):
    assert error_of(lambda: make(core)) == error_of(lambda: make(pure))


def test_construction_arguments_match():
    for args, kwargs in [(("x",), {}), (("x", False, 2), {}), ((), {"name": "x", "loop": 1}),
                         (("x",), {"is_common": 0, "mem": 3}), (("x",), {"loop": True}),
                         (("x",), {"loop": 1, "mem": 3, "tag": 0.5}), (("x", True, 2), {"a": 1}),
                         (("x",), {"a": True, "b": "2.5", "c": 2**70}),
                         (("x",), {"lo" + "op": 1, "a": 1})]:      # a keyword not interned
        c, p = core.Event(*args, **kwargs), pure.Event(*args, **kwargs)
        assert (c.name, c.is_common, c.loop, c.values) == (p.name, p.is_common, p.loop, p.values)
        assert all(type(v) is float for v in (c.values or {}).values())
    with pytest.raises(TypeError):
        core.Event()
    with pytest.raises(TypeError):
        core.Event("x", name="y")
    with pytest.raises(TypeError):
        core.Event("x", True, 0, 1)


def test_decorated_function_leaving_an_event_open_and_raising():
    @core.Event("g")
    def raises_and_leaves_open():
        core.Event("inner").__enter__()
        raise Boom
    with core.Event("main"):
        with pytest.raises(Boom) as info:
            raises_and_leaves_open()
        assert info.value.__context__ is None     # propagated unchanged
        assert core.current().name == "main"      # "g" exited over the open "inner"
    assert core.current() is core.root()


def test_exit_of_an_abandoned_entry_leaves_other_variables_alone():
    """An event exits while a later entry of its callpath is current: only the
    tinyprof variable changes, not others set since (the fast path's token is
    a whole map of variables, which must not be put back)."""
    other = contextvars.ContextVar("other")

    def program(m):
        first = m.Event("a")
        with m.Event("main"):
            first.__enter__()                     # abandoned when "main" exits
        with m.Event("main"):
            other.set(1)
            again = m.Event("a")
            again.__enter__()                     # the same callpath, from another map
            first.__exit__(None, None, None)
            assert m.current().name == "main"
            assert contextvars.copy_context().get(other) == 1   # the map, not a cache
            again.__exit__(None, None, None)
            assert m.current().name == "main"
            assert contextvars.copy_context().get(other) == 1
    on_both(lambda m: contextvars.copy_context().run(program, m))


def failing_clock(*failures):
    """Reads 10, 20, ...; raises OSError on the given (0-based) reads."""
    reads = itertools.count()

    def clock():
        i = next(reads)
        if i in failures:
            raise OSError("clock")
        return 10 * i
    return clock


def test_failing_clock_on_exit_matches_reference():
    def program(m):
        m.set_clock(failing_clock(2))
        with m.Event("main"):
            e = m.Event("b")
            e.__enter__()
            with pytest.raises(OSError):          # 3rd read: exiting "b"
                e.__exit__(None, None, None)
            assert m.current().name == "b"        # still open, as the clock came first
            e.__exit__(None, None, None)
    results = []
    for m in BOTH:
        program(m)
        results.append(dump(m))
    assert results[0] == results[1]


def test_failing_clock_on_enter_leaves_no_open_event():
    # _pyevent reads the clock after making the node current and stays inside
    # it; the C core undoes the entry instead.
    core.set_clock(failing_clock(1))
    with core.Event("main"):
        with pytest.raises(OSError):
            core.Event("a").__enter__()
        assert core.current().name == "main"

        @core.Event("f")
        def f():
            pass
        core.set_clock(failing_clock(0))
        with pytest.raises(OSError):
            f()
        assert core.current().name == "main"
        core.set_clock(None)
    assert core.current() is core.root()


def test_clock_values_must_be_integers():
    core.set_clock(lambda: "now")
    with pytest.raises(TypeError):
        core.Event("x").__enter__()
    assert core.current() is core.root()
    with pytest.raises(TypeError):
        core.set_clock(42)
    with pytest.raises(TypeError):
        core.set_metric_keys(None, None)
    with pytest.raises(TypeError):
        core.Event("x")(42)


# ---- the objects themselves ---------------------------------------------------

def test_node_attributes():
    with core.Event("a", is_common=False, loop=1):
        with core.Event("b"):
            pass
    a = core.root().children["a"]
    assert (a.name, a.loop, a.common, a.last_exec, a.count) == ("a", 1, False, 0, 1)
    assert a.parent is core.root() and core.root().parent is None
    assert type(a.children) is dict and list(a.children) == ["b"]
    times, execs = a.data()
    assert isinstance(times, bytes) and len(times) == 8 and array("q", execs).tolist() == [0, 0]
    a.consistent = {"tag": 1.0}
    a.metrics = None
    assert a.consistent == {"tag": 1.0} and a.metrics is None
    with pytest.raises(AttributeError):
        a.name = "z"
    n = core.Node("x", None)
    assert (n.name, n.parent, n.children, n.loop, n.common, n.count) == ("x", None, {}, 0, True, 0)
    assert "count=1" in repr(a)


def test_wrapper_looks_like_the_function_and_binds_as_a_method():
    def f(x):
        """Doc."""
        return x
    f.extra = 1
    w = core.Event("f")(f)
    assert (w.__name__, w.__qualname__, w.__doc__, w.__module__, w.__wrapped__, w.extra) == \
        (f.__name__, f.__qualname__, "Doc.", f.__module__, f, 1)
    assert "wrapping" in repr(w) or sys.version_info[:2] == (3, 12)   # there pyevent's (docs/events.md#depth)

    class A:
        @core.Event("m")
        def m(self, y):
            return self, y

        @staticmethod
        @core.Event("s")
        def s(y):
            return y

        @classmethod
        @core.Event("c")
        def c(cls):
            return cls
    a = A()
    assert a.m(2) == (a, 2) and A.m(a, 3) == (a, 3) and a.s(4) == 4 and a.c() is A
    assert [core.root().children[n].count for n in "msc"] == [2, 1, 1]


def test_enter_and_exit_work_unbound_and_through_exit_stack():
    e = core.Event("x")
    assert core.Event.__enter__(e) is e
    core.Event.__exit__(e, None, None, None)
    with contextlib.ExitStack() as stack:
        stack.enter_context(core.Event("y"))
        assert core.current().name == "y"
    assert [n.count for n in core.root().children.values()] == [1, 1]
    assert "bound method Event.__enter__" in repr(core.Event("z").__enter__)
    with pytest.raises(TypeError):
        core.Event.__enter__(42)
    with pytest.raises(TypeError):
        e.__enter__(1)


def test_reset_forgets_everything():
    with core.Event("main"):
        pass
    with core.Event("main"):
        pass
    old = core.root()
    assert core.executions() == 2
    core.reset()
    assert core.root() is not old and core.current() is core.root()
    assert core.executions() == 0 and core.root().children == {}
    with core.Event("other"):          # a new first root
        pass
    assert core.executions() == 1


# ---- references and memory -------------------------------------------------------

def live_nodes():
    return sum(type(o) is core.Node for o in gc.get_objects())


def test_references_are_balanced():
    name = "refcheck-" + "x" * 3       # a fresh str object
    values = {"mem": 1}

    @core.Event("dec")
    def f(arg):
        return arg
    arg = object()
    _eventmap.configure([("mem", False)])

    def body():
        with core.Event(name, **values):
            e = core.Event(name)
            with e:
                pass
            with core.Event(name, loop=True):   # through the shared validator
                pass
        f(arg)
    body()                             # creates the nodes, which keep the name
    before = [sys.getrefcount(o) for o in (name, arg, f)]
    for _ in range(1000):
        body()
    assert [sys.getrefcount(o) for o in (name, arg, f)] == before


def test_no_objects_leak():
    _eventmap.configure([("mem", False)])
    other = contextvars.ContextVar("other")

    @core.Event("dec", loop=2)
    def f(i):
        if i % 3 == 0:
            raise Boom
        return i

    def rows():
        with core.Event("rows"):
            yield 1

    def body(i):
        with core.Event("main"):
            with core.Event("x", mem=i):
                other.set(i % 2)          # the fallback path every other time
            with core.Event("y", loop=True, is_common=1):    # the shared validator
                pass
            try:
                f(i)
            except Boom:
                pass
            g = rows()
            next(g)                       # abandoned when "main" exits
        core.Event("z").__exit__(None, None, None)           # misuse, ignored
        with core.Event("main"):
            del g                         # exits "rows" out of order

    def run(n):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for i in range(n):
                body(i)
    ctx = contextvars.copy_context()
    ctx.run(run, 100)                     # nodes, free lists, kept maps
    gc.collect()
    before = sys.getallocatedblocks()
    ctx.run(run, 3000)
    gc.collect()
    assert sys.getallocatedblocks() - before < 50


def test_trees_and_wrappers_are_collected():
    gc.collect()
    baseline = live_nodes()
    for depth in range(20):
        with contextlib.ExitStack() as stack:
            for i in range(depth):
                stack.enter_context(core.Event(f"n{i}"))

    @core.Event("rec")
    def rec(n):             # the wrapper is reachable from its own function: a cycle
        return rec(n - 1) if n else 0
    rec(30)
    gone = weakref.ref(rec.__wrapped__)
    assert live_nodes() > baseline
    rec = None              # drops the last outside reference (a del would confuse pyflakes)
    core.reset()
    gc.collect()
    assert live_nodes() == baseline       # the new root replaces the old one
    assert gone() is None


def test_kept_context_maps_are_released_by_reset():
    """The fast path keeps each node's last context maps (documented cost)."""
    other = contextvars.ContextVar("other")

    class Payload:
        pass

    def task():
        other.set(Payload())
        with core.Event("x"):
            pass
        return weakref.ref(other.get())
    ref = contextvars.copy_context().run(task)
    gc.collect()
    assert (ref() is not None) is core._fast_context
    core.reset()
    gc.collect()
    assert ref() is None


def test_deep_recursion_frees_without_crashing():
    @core.Event("r")
    def r(n):
        return r(n - 1) if n else 0
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(10000)
    try:
        r(2000)
    finally:
        sys.setrecursionlimit(limit)
    core.reset()
    gc.collect()


def test_values_cost_at_most_eight_bytes_each():
    n = 200_000
    with core.Event("warm"):
        pass
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        with core.Event("main"):
            for _ in range(n):
                with core.Event("x"):
                    pass
        grown = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    assert core.root().children["main"].children["x"].count == n
    assert grown < n * 8 * 1.3 + 64 * 1024      # int64 values, growth slack, a few objects


def test_stub_declares_exactly_the_public_names():
    """tinyprof/annotate/_core.pyi (for type checkers) against the built module."""
    stub = ast.parse(Path(core.__file__).with_name("_core.pyi").read_text())

    def declared(body):
        return ({n.name for n in body if isinstance(n, (ast.FunctionDef, ast.ClassDef))} |
                {n.target.id for n in body if isinstance(n, ast.AnnAssign)})
    assert declared(stub.body) == {n for n in vars(core) if not n.startswith("__")}
    assert (Path(core.__file__).parent.parent / "py.typed").exists()   # the package is typed
    for cls in (n for n in stub.body if isinstance(n, ast.ClassDef)):
        for member in declared(cls.body):
            assert hasattr(getattr(core, cls.name), member), (cls.name, member)
        public = {n for n in vars(getattr(core, cls.name)) if not n.startswith("_")}
        assert public <= declared(cls.body), cls.name

