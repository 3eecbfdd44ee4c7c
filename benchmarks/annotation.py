"""Annotation cost: ns per enter+exit of an event, C core vs pure Python vs
baselines; and the time of ``import tinyprof``.

    .venv/bin/python benchmarks/annotation.py [--repeats 7] [--iterations 200000]

Every case runs once per repeat, all interleaved, so machine noise hits them
alike; each figure is the median over the repeats of the time per loop
iteration minus that of an empty loop. The event map is reset before every
run, so no run pays for the values of the ones before. Prints a Markdown table
(the one in docs/performance.md).

The import time is the cumulative figure ``python -X importtime -c "import
tinyprof"`` reports for ``tinyprof``, median of ``--repeats`` fresh processes
(after one that warms the bytecode cache), with numpy's for comparison.
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
from time import perf_counter_ns
from typing import Callable, Dict, List, Optional

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")   # numpy's idle BLAS threads off our cores

import tinyprof
from tinyprof import annotate
from tinyprof.annotate import metrics as _eventmap
from tinyprof.annotate import pyevent

try:
    from tinyprof.annotate import _core
except ImportError:
    _core = None

GOAL_NS = 250
GOAL_IMPORT_MS = 20
GOAL_METRICS = 2.0


class Trivial:
    """The baseline: a context manager that does nothing."""

    __slots__ = ()

    def __enter__(self) -> Trivial:
        return self

    def __exit__(self, *exc) -> None:
        pass


def empty() -> None:
    pass


def empty_loop(n: int) -> None:
    for _ in range(n):
        pass


def trivial_with(n: int) -> None:
    for _ in range(n):
        with Trivial():
            pass


def bare_call(n: int) -> None:
    for _ in range(n):
        empty()


def clock_pair(n: int) -> None:
    for _ in range(n):
        perf_counter_ns()
        perf_counter_ns()


def core_with(n: int) -> None:
    for _ in range(n):
        with _core.Event("x"):
            pass


def core_with_nested(n: int) -> None:
    with _core.Event("outer"):
        for _ in range(n):
            with _core.Event("x"):
                pass


def core_decorated(n: int) -> None:
    for _ in range(n):
        core_empty()


def core_with_metrics(n: int) -> None:
    # The demo's events: a consistent and an inconsistent metric value each.
    for _ in range(n):
        with _core.Event("x", kind=1, bytes=8):
            pass


def core_switched_off(n: int) -> None:
    for _ in range(n):
        with _core.NullEvent("x"):
            pass


def pure_switched_off(n: int) -> None:
    for _ in range(n):
        with annotate._NullEvent("x"):
            pass


def pure_with(n: int) -> None:
    for _ in range(n):
        with pyevent.Event("x"):
            pass


def pure_decorated(n: int) -> None:
    for _ in range(n):
        pure_empty()


core_empty = _core.Event("x")(empty) if _core is not None else None
pure_empty = pyevent.Event("x")(empty)


def usable(case: Callable[[int], None]) -> Optional[str]:
    """None if the case runs, else why not."""
    if case.__name__.startswith("core") and _core is None:
        return "C core not built"
    try:
        case(1)
    except Exception as exc:
        return f"fails: {type(exc).__name__}: {exc}"
    return None


def measure(cases: List[Callable[[int], None]], repeats: int, n: int) -> Dict[str, List[float]]:
    """ns per iteration of each case, one list entry per repeat."""
    times: Dict[str, List[float]] = {case.__name__: [] for case in cases}
    for _ in range(repeats):
        for case in cases:
            for mod in (_core, pyevent):
                if mod is not None:
                    mod.reset()
            start = perf_counter_ns()
            case(n)
            times[case.__name__].append((perf_counter_ns() - start) / n)
    for mod in (_core, pyevent):
        if mod is not None:
            mod.reset()
    return times


def import_ms(module: str) -> float:
    """Cumulative ms ``-X importtime`` reports for ``module``, in a fresh process."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"],
                          capture_output=True, text=True, check=True)
    for line in done.stderr.splitlines():
        cells = line.split("|")
        if len(cells) == 3 and cells[2].strip() == module:
            return int(re.sub(r"\D", "", cells[1])) / 1000
    raise RuntimeError(f"no import time reported for {module}")


def loads_numpy() -> bool:
    """Whether importing tinyprof and annotating load numpy or pandas."""
    code = ("import sys, tinyprof\n"
            "with tinyprof.Event('x'):\n    pass\n"
            "print(any(m in sys.modules for m in ('numpy', 'pandas')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.strip() == "True"


def import_times(repeats: int) -> Dict[str, float]:
    """Median cumulative import ms of tinyprof and numpy, interleaved."""
    times: Dict[str, List[float]] = {"tinyprof": [], "numpy": []}
    for module in times:
        import_ms(module)                                # warm the bytecode cache
    for _ in range(repeats):
        for module in times:
            times[module].append(import_ms(module))
    return {module: statistics.median(values) for module, values in times.items()}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


ROWS = [   # case, label, baseline subtracted besides the empty loop
    (core_with, '`with Event("x")`, C core', None),
    (core_with_nested, '`with Event("x")` inside an open event, C core', None),
    (core_decorated, '`@Event("x")` empty function, C core, minus the bare call', bare_call),
    (core_with_metrics, '`with Event("x", kind=1, bytes=8)`, C core, metrics `kind:0,bytes:1`', None),
    (core_switched_off, '`with Event("x")` under `TINYPROF=0`, C core', None),
    (pure_switched_off, '`with Event("x")` under `TINYPROF=0`, pure Python', None),
    (pure_with, '`with Event("x")`, pure Python', None),
    (pure_decorated, '`@Event("x")` empty function, pure Python, minus the bare call', bare_call),
    (trivial_with, "`with Trivial()`: empty context manager, new object each time", None),
    (bare_call, "bare call of the empty function", None),
    (clock_pair, "two `time.perf_counter_ns()` calls", None),
]


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--iterations", type=int, default=200_000)
    args = parser.parse_args(argv)
    _eventmap.configure([("kind", True), ("bytes", False)])   # the metrics core_with_metrics gives

    skipped = {case.__name__: why for case, _, _ in ROWS if (why := usable(case))}
    cases = [empty_loop] + [case for case, _, _ in ROWS if case.__name__ not in skipped]
    times = measure(cases, args.repeats, args.iterations)
    loop = statistics.median(times["empty_loop"])

    def net(name: str) -> float:
        return statistics.median(times[name]) - loop

    print(f"Python {platform.python_version()} ({platform.python_implementation()}), "
          f"CPU: {cpu_model()}, {os.cpu_count()} cores")
    fast = "n/a" if _core is None else ("on" if _core._fast_context else "off")
    print(f"tinyprof {tinyprof.__version__}; C core: {'built' if _core else 'not built'}, "
          f"fast ContextVar path: {fast}")
    print(f"{args.repeats} repeats x {args.iterations} iterations, interleaved; "
          f"median ns per iteration minus an empty loop ({loop:.1f} ns)\n")
    print("| case | ns | spread over repeats |")
    print("| --- | ---: | ---: |")
    for case, label, minus in ROWS:
        name = case.__name__
        if name in skipped:
            print(f"| {label} | n/a | {skipped[name]} |")
            continue
        value = net(name) - (net(minus.__name__) if minus else 0.0)
        spread = max(times[name]) - min(times[name])
        print(f"| {label} | {value:.0f} | {spread:.0f} |")
    if "core_with" not in skipped:
        ratio = net("core_with") / net("trivial_with")
        print(f"| ratio C core `with` / empty context manager | {ratio:.2f} | |")
        metrics = net("core_with_metrics") / net("core_with")
        print(f"| ratio C core `with` with metric values / without | {metrics:.2f} | |")
        verdict = "met" if net("core_with") <= GOAL_NS else "missed"
        print(f"\nGoal: C core `with` <= {GOAL_NS} ns: {verdict}")
        verdict = "met" if metrics <= GOAL_METRICS else "missed"
        print(f"Goal: an event with metric values <= {GOAL_METRICS:g}x one without: {verdict}")

    imports = import_times(args.repeats)
    verdict = "met" if imports["tinyprof"] <= GOAL_IMPORT_MS else "missed"
    print(f"\n`import tinyprof`: {imports['tinyprof']:.1f} ms (numpy alone: {imports['numpy']:.1f} ms; "
          f"numpy or pandas loaded by importing and annotating: {'yes' if loads_numpy() else 'no'}), "
          f"median of {args.repeats} fresh processes, `python -X importtime`")
    print(f"Goal: `import tinyprof` <= {GOAL_IMPORT_MS} ms: {verdict}")


if __name__ == "__main__":
    main()
