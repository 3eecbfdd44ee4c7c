"""Reading delta snapshots: a file of snapshot K ``over`` J is rebuilt from
the same file of J (itself rebuilt if a delta, down to a full snapshot)
and K's ``delta`` section, into the bytes a full snapshot K would have had,
which are then parsed as any file. docs/format.md, "Snapshots".

:func:`parse` is how the reader (``analysis/profile.py``) reads every file of
a profile: a full one as it is, a delta through its chain.
"""
from __future__ import annotations

import os
from dataclasses import replace
from typing import Dict, List, Optional, Tuple

from ..errors import FormatError
from . import delta_section
from .encoding import encode_file
from .reader import ParsedFile, parse_data, parse_file, read_regular

Callpath = Tuple[str, ...]


def parse(path: str) -> ParsedFile:
    """Parse one file of a profile; a delta snapshot's through its chain."""
    parsed = parse_file(path)
    if parsed.header.set_base is None:
        return parsed
    data, numbers = _rebuild(parsed)
    try:
        return parse_data(path, data)
    except FormatError as e:
        raise FormatError(path, None, f"snapshot rebuilt from its chain ({numbers}) is "
                                      f"not well formed: {e.problem}") from None


def rebuild(path: str) -> bytes:
    """The bytes of the full file holding what file ``path`` holds."""
    parsed = parse_file(path)
    return _read(path) if parsed.header.set_base is None else _rebuild(parsed)[0]


def _rebuild(parsed: ParsedFile) -> Tuple[bytes, str]:
    """A delta file's full bytes, and its chain's numbers (for messages)."""
    chain = [parsed]
    fields = None
    while fields is None and chain[-1].header.set_base is not None:
        base = _base_path(chain[-1])
        fields = _recent_fields(base)
        if fields is None:
            chain.append(_base_file(chain[-1], base))
    chain.reverse()
    if fields is None:
        fields = _raw_fields(chain[0])
        chain = chain[1:]
    for delta in chain:
        fields = _apply(delta, fields)
    _remember(parsed.path, fields)
    h = parsed.header
    data = encode_file(replace(h, set_base=None), parsed.names, parsed.parents, parsed.ids,
                       parsed.values.loops, [fields[p][0] for p in parsed.paths],
                       [[fields[p][1 + r] for p in parsed.paths] for r in range(h.rank_count)],
                       [(n, s) for n, s in parsed.sections.items() if n != "delta"])
    return data, f"{h.set_number} over {h.set_base}"


# The fields of the newest rebuilt file of each name, so that reading the
# snapshots of a run one after the other (the report's time series) applies
# each delta once instead of rebuilding every chain from its full snapshot.
# One entry per file name: about one profile's bytes at most.
_recent: Dict[str, Tuple[tuple, Dict[Callpath, List[bytes]]]] = {}


def _stat_key(path: str) -> tuple:
    st = os.stat(path)
    return os.path.abspath(path), st.st_ino, st.st_size, st.st_mtime_ns


def _recent_fields(path: str) -> Optional[Dict[Callpath, List[bytes]]]:
    got = _recent.get(os.path.basename(path))
    try:
        return got[1] if got is not None and got[0] == _stat_key(path) else None
    except OSError:
        return None


def _remember(path: str, fields: Dict[Callpath, List[bytes]]) -> None:
    try:
        _recent[os.path.basename(path)] = (_stat_key(path), fields)
    except OSError:
        pass


def _base_path(delta: ParsedFile) -> str:
    """The path of the file that ``delta`` builds on: the same file of its base snapshot."""
    snapshots = os.path.dirname(os.path.dirname(os.path.abspath(delta.path)))
    return os.path.join(snapshots, f"{delta.header.set_base:06d}", os.path.basename(delta.path))


def _base_file(delta: ParsedFile, path: str) -> ParsedFile:
    """The file at ``path`` that ``delta`` builds on, checked to be that one."""
    h = delta.header
    if not os.path.exists(path):
        raise FormatError(delta.path, None, f"delta over snapshot {h.set_base}, whose file "
                                            f"{path} is missing")
    base = parse_file(path)
    b = base.header
    if (b.name, b.run, b.nranks, b.metrics, b.first_rank, b.rank_count, b.file_index,
            b.file_count, b.set_kind, b.set_number) != (
            h.name, h.run, h.nranks, h.metrics, h.first_rank, h.rank_count, h.file_index,
            h.file_count, "snapshot", h.set_base):
        raise FormatError(path, None, f"is not the file {delta.path} is a delta over "
                                      f"(snapshot {h.set_base} of run {h.run}, same ranks)")
    return base


def _raw_fields(parsed: ParsedFile) -> Dict[Callpath, List[bytes]]:
    """A full file's event lines as raw bytes: per callpath, its consistent
    field and then one field per rank."""
    data = _read(parsed.path)
    lines = data.split(b"\n", 14 + len(parsed.names) + len(parsed.paths))
    events = lines[14 + len(parsed.names):14 + len(parsed.names) + len(parsed.paths)]
    return {path: line.split(b"|")[2:] for path, line in zip(parsed.paths, events)}


def _apply(delta: ParsedFile, before: Dict[Callpath, List[bytes]]) -> Dict[Callpath, List[bytes]]:
    """The fields of ``delta``'s snapshot from those of its base."""
    h = delta.header
    if "delta" not in delta.sections:
        raise FormatError(delta.path, None, "a delta snapshot without a delta section")
    splices = delta_section.parse(delta.sections["delta"], delta.path,
                                  delta.section_lines["delta"], len(delta.paths),
                                  h.first_rank, h.rank_count)
    consistent = _raw_fields(delta)
    after = {}
    for path in delta.paths:
        old = before.get(path)
        after[path] = [consistent[path][0], *(old[1:] if old else [b""] * h.rank_count)]
    for line, rank, keep, text in splices:
        row = after[delta.paths[line]]
        field = row[1 + rank - h.first_rank]
        if keep > len(field):
            raise FormatError(delta.path, None, f"delta section keeps {keep} bytes of rank "
                                                f"{rank}'s field on line {line}, which has {len(field)}")
        row[1 + rank - h.first_rank] = field[:keep] + text
    return after


def _read(path: str) -> bytes:
    return read_regular(path)

