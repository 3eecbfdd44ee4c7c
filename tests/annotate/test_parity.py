"""One set of programs run through both hot paths: the C core ``tinyprof.annotate._core``
and the pure-Python ``tinyprof.annotate.pyevent`` (what ``TINYPROF_PURE=1`` selects).

Each program gets an injected clock and declared metric keys; the recorded
trees (names, loops, times, execution boundaries, metric values as stored),
the warnings (text and line) and the errors must be identical. docs/events.md
states the rules these programs exercise.
"""
from __future__ import annotations

import asyncio
import contextvars
import itertools
import math
import threading
import warnings
from array import array

import pytest

from tinyprof.annotate import args as _args
from tinyprof.annotate import metrics as _eventmap
from tinyprof.annotate import pyevent

core = pytest.importorskip("tinyprof.annotate._core", reason="the C core was not built")
BOTH = [core, pyevent]


def fake_clock():
    """A deterministic clock with uneven steps (catches start/end mix-ups)."""
    ticks = itertools.accumulate(itertools.cycle([3, 7, 1, 12, 5, 2]))
    return lambda: next(ticks)


def path(node) -> tuple:
    names = []
    while node.parent is not None:
        names.append(node.name)
        node = node.parent
    return tuple(reversed(names))


def tree(mod) -> list:
    """Every callpath, pre-order: name path, loop, common, depth, times, executions, metrics."""
    out = []

    def walk(node):
        for name, child in node.children.items():
            assert child.name == name and child.parent is node
            times, execs = (array("q", raw).tolist() for raw in child.data())
            metrics = {k: [None if math.isnan(v) else v for v in array("d", bytes(col))]
                       for k, col in (child.metrics or {}).items()}
            out.append((path(child), child.loop, child.common, child.depth, times, execs,
                        child.last_exec, child.consistent, metrics))
            walk(child)

    walk(mod.root())
    return out


# The keys the programs declare; they also use undeclared ones (warned once each).
DECLARED = [("tag", True), ("bytes", False), ("mem", False), ("late", False)]


def run(mod, program):
    """Everything observable of program(mod) on a fresh map."""
    mod.reset()
    _args.warned.clear()
    _eventmap.configure(DECLARED)
    mod.set_metric_keys(_eventmap.keys, _eventmap.warn_undeclared)
    mod.set_clock(fake_clock())
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                program(mod)
                error = None
            except Exception as exc:
                error = (type(exc), str(exc))
        return {"tree": tree(mod), "executions": mod.executions(),
                "warnings": [(w.category, str(w.message), w.lineno) for w in caught],
                "error": error, "current": path(mod.current())}
    finally:
        mod.set_clock(None)
        mod.reset()
        _args.warned.clear()
        _eventmap.configure([])


# ---- the programs ---------------------------------------------------------------

def nested_loops_and_executions(m):
    for _ in range(3):
        with m.Event("main"):
            with m.Event("solve", loop=1):
                for _ in range(2):
                    with m.Event("iter", loop=1):
                        pass
            for _ in range(3):
                with m.Event("exchange", loop=2, is_common=False):
                    with m.Event("exchange"):
                        pass
        with m.Event("post"):        # another root: no new execution
            pass


def metrics(m):
    with m.Event("main"):
        for i in range(3):
            with m.Event("send", False, 2, tag=i, bytes=8 * i):
                pass
        with m.Event("recv", mem=1.5):
            pass
    for e in range(3):              # loop 2: summed per execution; NaN given never wipes a sum
        with m.Event("main"):
            for i in range(3):
                with m.Event("sum", loop=2, bytes=float("nan") if i == 1 else i + e):
                    pass
            with m.Event("gap", loop=1, mem=e):      # ints, floats, bools, numeric strings
                pass
            with m.Event("gap", loop=1, late=True, mem="2.5"):
                pass
            with m.Event("gap", loop=1, tag=2**70, other=1):    # an undeclared key
                pass
    with m.Event("big", mem=2**2000):       # OverflowError, as float() raises it
        pass


def decorators(m):
    @m.Event("fib", loop=0, depth=1)
    def fib(n):
        return n if n < 2 else fib(n - 1) + fib(n - 2)

    @m.Event("fails")
    def fails():
        raise KeyError("boom")

    with m.Event("main"):
        assert fib(4) == 3
        try:
            fails()
        except KeyError:
            pass


def exceptions(m):
    with m.Event("main"):
        try:
            with m.Event("inner"):
                raise ValueError
        except ValueError:
            pass
    with m.Event("main"):
        raise LookupError("from the body")


def threads(m):
    def worker(i):
        with m.Event("worker"):
            for _ in range(i + 1):
                with m.Event("step", loop=1):
                    pass

    with m.Event("main"):
        for i in range(3):      # one at a time: the clock's reads are in a fixed order
            t = threading.Thread(target=worker, args=(i,))
            t.start()
            t.join()


def generator_abandoned(m):
    """The issue's program, then the generator finishes in the next execution."""
    def rows():
        with m.Event("read_rows"):
            yield from range(3)

    with m.Event("main"):
        g = rows()
        next(g)
    with m.Event("main"):
        with m.Event("drain"):
            assert sum(g) == 3


def generator_collected(m):
    def rows():
        with m.Event("read_rows", loop=2):
            yield 1

    with m.Event("main"):
        for _ in range(2):
            with m.Event("load"):
                g = rows()
                next(g)
            with m.Event("compute"):
                del g                               # GeneratorExit inside "compute"


def ancestor_exits(m):
    a, b, c, d = (m.Event(n) for n in "abcd")
    a.__enter__()
    b.__enter__()
    c.__enter__()
    d.__enter__()
    b.__exit__(None, None, None)        # c and d abandoned
    with m.Event("e"):
        d.__exit__(None, None, None)    # abandoned: records, "e" stays current
        c.__exit__(None, None, None)
    a.__exit__(None, None, None)


def exits_elsewhere(m):
    """An event exited in a copied context and in another thread."""
    with m.Event("main"):
        first, second = m.Event("copied"), m.Event("threaded")
        first.__enter__()
        contextvars.copy_context().run(first.__exit__, None, None, None)
        assert m.current().name == "copied"        # this context still has it open
        first.__exit__(None, None, None)           # exited twice: warns
        second.__enter__()
        t = threading.Thread(target=second.__exit__, args=(None, None, None))
        t.start()
        t.join()
        assert m.current().name == "threaded"


def coroutines(m):
    async def step(name):
        with m.Event(name):
            await asyncio.sleep(0)

    async def stream():
        with m.Event("stream"):
            yield 1
            yield 2

    async def main():
        with m.Event("main"):
            await asyncio.gather(step("a"), step("b"))
            with m.Event("consume"):
                s = stream()
                await s.__anext__()
            await s.aclose()

    asyncio.run(main())


def callbacks(m):
    async def main():
        loop = asyncio.get_running_loop()
        request = m.Event("request")
        with m.Event("main"):
            loop.call_soon(request.__enter__)
            await asyncio.sleep(0)
            loop.call_soon(request.__exit__, None, None, None)
            await asyncio.sleep(0)

    asyncio.run(main())


def misuse(m):
    e = m.Event("x")
    e.__exit__(None, None, None)            # never entered
    with e:
        e.__enter__()                       # entered again while open
    e.__exit__(None, None, None)            # exited twice
    e.__exit__(None, None, None)            # warned once per kind only
    m.Event("y").__exit__(None, None, None)
    with e:                                 # reusable afterwards
        pass


def reset_midway(m):
    with m.Event("main"):
        with m.Event("old"):
            pass
    m.reset()
    with m.Event("fresh"):
        with m.Event("inner", loop=2):
            pass
    with m.Event("main"):
        pass


def deep(m):
    events = [m.Event(f"e{i % 3}") for i in range(500)]
    for e in events:
        e.__enter__()
    events[250].__exit__(None, None, None)
    for e in reversed(events):
        e.__exit__(None, None, None)


PROGRAMS = [nested_loops_and_executions, metrics, decorators, exceptions, threads,
            generator_abandoned, generator_collected, ancestor_exits, exits_elsewhere,
            coroutines, callbacks, misuse, reset_midway, deep]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_same_program_same_record(program):
    c, p = (run(mod, program) for mod in BOTH)
    assert c == p
    assert c["tree"] and c["current"] == ()


def test_the_programs_record_what_they_should():
    """A few anchors, so that parity is not parity in doing nothing."""
    r = run(core, generator_abandoned)
    assert [t[0] for t in r["tree"]] == [("main",), ("main", "read_rows"), ("main", "drain")]
    assert r["tree"][1][5] == [1, 0]           # read_rows: recorded in execution 1
    assert r["error"] is None and r["warnings"] == []
    r = run(core, misuse)
    assert [w[1] for w in r["warnings"]] == [
        "tinyprof: event 'x' exited without being entered; ignored (warned once)",
        "tinyprof: event 'x' entered again while it is open; ignored (warned once)",
        "tinyprof: event 'x' exited twice; ignored (warned once)"]
    assert r["tree"][0][4] and len(r["tree"][0][4]) == 2
    r = run(core, exceptions)
    assert r["error"] == (LookupError, "from the body")
    r = run(core, metrics)
    send, recv, total, gap = (r["tree"][i] for i in (1, 2, 3, 4))
    assert send[0] == ("main", "send") and send[7] == {"tag": 0.0}
    assert send[8] == {"bytes": [24.0]}         # loop 2: one sum per execution
    assert recv[8] == {"mem": [1.5]}
    assert total[0] == ("main", "sum") and total[8] == {"bytes": [2.0, 4.0, 6.0]}
    assert gap[7] == {"tag": float(2**70)} and gap[8] == {      # a column ends at its last value
        "mem": [0.0, 2.5, None, 1.0, 2.5, None, 2.0, 2.5],
        "late": [None, 1.0, None, None, 1.0, None, None, 1.0]}
    assert [w[1] for w in r["warnings"]] == [
        "tinyprof: metric 'other' (event 'gap') is not declared in Profiler(selfkeys=...); "
        "its values are not recorded"]
    assert r["error"][0] is OverflowError


# ---- constructor arguments: one validator -------------------------------------------

class Name(str):
    pass


class NumpyLikeInt:
    """Equal to 2, as a numpy integer is: not an exact int, so the slow path."""

    def __eq__(self, other):
        return other == 2

    __hash__ = None


@pytest.mark.parametrize("args, kwargs", [
    (("x",), {}), (("x", False, 2), {}), ((), {"name": "x", "loop": 1}),
    (("x",), {"loop": True}), (("x",), {"loop": 1.0}), (("x",), {"loop": NumpyLikeInt()}),
    (("x",), {"is_common": 0}), (("x",), {"is_common": ""}), (("x", None), {}),
    ((Name("x"),), {}), (("x",), {"mem": 3, "tag": True}), (("x",), {"mem": 2 ** 70}),
    ((3,), {}), ((b"x",), {}), (("x",), {"loop": 3}), (("x",), {"loop": -1}),
    (("x",), {"loop": 2 ** 70}), (("x",), {"loop": "1"}), (("x",), {"loop": None}),
    (("x",), {"mem": "lots"}), (("x",), {"mem": None, "tag": 1}), ((3,), {"loop": 7}),
])
def test_constructor_arguments_are_checked_alike(args, kwargs):
    def make(mod):
        try:
            e = mod.Event(*args, **kwargs)
        except (TypeError, ValueError) as exc:
            return type(exc), str(exc)
        return e.name, type(e.name), e.is_common, e.loop, type(e.loop), e.values
    assert make(core) == make(pyevent)


def test_normalised_arguments():
    for mod in BOTH:
        e = mod.Event("x", loop=True, is_common=0, mem=2)
        assert (e.loop, type(e.loop), e.is_common, e.values) == (1, int, False, {"mem": 2.0})
