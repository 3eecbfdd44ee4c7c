"""Types of tinyprof.runtime._frames (built from _frames.c: sites.c and sampler.c).

Python's frames read where Python cannot: the MPI call sites, without the GIL,
and every thread's stack and context for the sampler (docs/unannotated.md).
``Samples`` and the ``sites_*`` functions exist only where ``sites_supported()``.
"""
from typing import Any, Callable, Dict, List, Optional, Tuple

def sites_supported() -> bool:
    """Whether this Python's frames can be read (CPython 3.11 to 3.13 with the GIL)."""

def sites_start(core_source: int, depth: int, rules: Tuple[Tuple[str, bool], ...]) -> int:
    """A fresh site table of ``depth`` user frames; ``rules``: (path prefix,
    skipped?) in order, the first match wins. Returns the address of the
    source function that libtinyprof_mpi calls per MPI call."""

def sites_below(node: int) -> None:
    """The node id the sites of threads with no open event go below (0: the root)."""

def sites_read() -> Tuple[List[Tuple[int, int, Tuple[str, ...]]], int]:
    """([(site id, parent node id, frame names outermost first)], table full?)."""

def contexts() -> Dict[int, Any]:
    """{thread id: the thread's current contextvars.Context, or None}."""

class Samples:
    """One process's sampled stacks, counted in C."""

    default: int
    """Parent node id of threads with no open event (0: the main thread's outermost open event)."""
    @property
    def taken(self) -> int:
        """Samples taken."""
    @property
    def by_main(self) -> int:
        """Of which taken by the main thread's pending call, while it ran Python."""
    @property
    def main_ns(self) -> int:
        """The main thread's time in those pending calls, in ns."""

    def __init__(self, executions: Callable[[], int], names: Callable[[], Dict[int, Optional[str]]],
                 node_type: type, main: int, in_call: int = 0) -> None: ...
    def take(self) -> None:
        """One sample of every thread but tinyprof's."""
    def run(self, interval_ns: int, limit: int) -> bool:
        """Sleep, take a sample, until stop() (False) or ``limit`` stacks are held (True)."""
    def stop(self) -> None:
        """run() returns after its current sleep."""
    def drain(self) -> List[Tuple[int, int, Optional[str], int, Tuple[Any, ...], int]]:
        """[(execution, parent node id, thread name or None, op code of the MPI
        call it was inside or -1, code objects innermost first, ns)] since the
        last drain."""
