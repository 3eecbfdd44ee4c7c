"""How deep a recursive function goes, undecorated and decorated (docs/events.md#depth).

    PYTHONPATH=. .venv-3.12/bin/python -P benchmarks/recursion.py [--cap 20000]

With ``sys.setrecursionlimit`` raised far above ``--cap``, a binary search
per case finds the deepest recursion that returns rather than raising
``RecursionError``: undecorated, under a plain Python ``*args`` decorator,
under ``@tinyprof.Event`` and under ``functools.lru_cache``. Each depth is
tried in a fresh process, since a C stack overflow (3.11 with the limit
raised) kills the process: such a depth counts as failed. ``--cap`` means
"at least this deep".
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import textwrap

CASES = {
    "undecorated": "def deco(f): return f",
    "plain Python decorator": textwrap.dedent("""
        import functools
        def deco(f):
            @functools.wraps(f)
            def wrapper(*args, **kwargs):
                return f(*args, **kwargs)
            return wrapper"""),
    "@tinyprof.Event": "import tinyprof\ndeco = tinyprof.Event('r')",
    "functools.lru_cache": "import functools\ndeco = functools.lru_cache(maxsize=None)",
}

PROGRAM = """
import sys
sys.setrecursionlimit(10 * {depth} + 1000)
{setup}
@deco
def r(n):
    return r(n - 1) if n else 0
r({depth})
"""


def returns(setup: str, depth: int) -> bool:
    # -P: not the current directory's tinyprof, but the one this process imports
    proc = subprocess.run([sys.executable, "-P", "-c", PROGRAM.format(depth=depth, setup=setup)],
                          capture_output=True, timeout=120)
    return proc.returncode == 0


def deepest(setup: str, cap: int) -> int:
    lo, hi = 0, cap
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if returns(setup, mid) else (lo, mid - 1)
    return lo


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cap", type=int, default=20000)
    args = p.parse_args()
    from tinyprof import annotate
    print(f"Python {sys.version.split()[0]}, tinyprof's {annotate.impl.__name__.rpartition('.')[2]}: "
          f"the deepest recursion that returns (at most --cap {args.cap})\n")
    print("| case | levels |\n| --- | ---: |")
    for name, setup in CASES.items():
        depth = deepest(setup, args.cap)
        print(f"| {name} | {depth:,}{' (the cap)' if depth == args.cap else ''} |")


if __name__ == "__main__":
    main()
