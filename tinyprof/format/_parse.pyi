"""Types of tinyprof.format._parse, the C parser of event lines and MPI rows (built from _parse.c).

The pure-Python twins are the reference parsers in tinyprof/format/pyparser.py
(``reader.parse_file(path, "python")``) and tinyprof/format/mpi_section.py
(``parse(..., parser="python")``); tests/format/test_reader_parity.py and
test_mpi_parity.py keep them in parity.
"""
from typing import List, Optional, Tuple

class Block:
    """Parsed values in memory the parser allocated, freed with the last
    view; it exports the buffer protocol (read it with ``numpy.frombuffer``)."""

    def __buffer__(self, flags: int, /) -> memoryview: ...


def parse_events(data: bytes, pos: int, stop: int, nevents: int, nnames: int, executions: bytes,
                 ncons: int, ninc: int, gaps: bool) -> Optional[Tuple[int, Block, Block, Block, Block, Block,
                                                          Block, Block, Block, Block, Block,
                                                          List[Block]]]:
    """Parse the ``nevents`` event lines of a version-2 file (``gaps`` false)
    or a version-3 file (``gaps``: ``*k;`` skips executions) from byte ``pos``
    (the end line starts at ``stop``), for a file whose ranks have
    ``executions`` (native int64 bytes) executions, ``nnames`` names, ``ncons``
    consistent and ``ninc`` inconsistent metrics. The GIL is released while
    it scans.

    None if any line breaks the grammar of docs/format.md. Else ``(end,
    parents, ids, loops, consistent, given, times, line_values, slots, counts,
    line_slots, metrics)``: the position after the lines, then native arrays
    as Blocks (no copy): int64 parent line and name id per line, int8 loop per
    line, float64 consistent values (lines x ncons) with uint8 ``given``
    flags, int64 times of every line in order, int64 offsets of each line's
    times (nevents + 1), int64 slots (executions numbered across the ranks)
    with their int64 value counts, int64 offsets of each line's slots
    (nevents + 1), and one float64 column per inconsistent metric aligned
    with the times (NaN: missing).
    """


def mpi_rows(payload: bytes, pos: int, ncomms: int, nlines: int, first_rank: int, count: int,
             nranks: int) -> Optional[Tuple[int, List[Tuple[int, int, int, str, int, int, int, int]],
                                              List[Tuple[int, int, int, int, int, int]]]]:
    """The ``ops`` and ``peers`` blocks of an ``mpi`` section payload, from
    byte ``pos`` (after the communicators), of a file holding ranks
    ``first_rank`` .. ``first_rank+count-1`` of ``nranks``, ``nlines`` event
    lines and ``ncomms`` communicators. The GIL is released while it scans.

    None if any row breaks docs/format.md (the reference,
    ``mpi_section._reference_rows``, then names it). Else ``(end, ops,
    peers)``: the position after the peers rows, and the rows as tuples, as
    ``mpi_section.parse`` returns them (-1: an empty optional field).
    """
