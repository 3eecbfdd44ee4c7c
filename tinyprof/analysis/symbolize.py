"""C call sites resolved to source lines when a profile is read.

A preloaded binary's call sites (docs/native.md, "Unchanged binaries") are
written as ``function (object+0xoffset)``, with the run metadata's
``site_objects`` naming each object's file, size and modification time. Here
each such name becomes ``function (file.c:line)`` with binutils' ``addr2line``,
one process per object, when that file is still the same one (same size and
time); otherwise, or without ``addr2line``, the name stays as written. Never
raises: a name that is not a site is left alone.
"""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time
import warnings
from typing import Dict, List, Mapping, Optional, Sequence, Set, Tuple

from ..format.reader import ParsedFile

MAX_OBJECTS = 64            # addr2line processes per profile
MAX_ADDRESSES = 1 << 16     # offsets resolved per profile; the rest keep their names
TIMEOUT = 30.0              # seconds for all addr2line processes of a profile

Site = Tuple[str, int]      # (object, offset)

Found = Tuple[str, str]     # (function, "file:line"); either "" when addr2line does not know
_cache: Dict[Tuple[str, int, int, int], Found] = {}    # (path, size, mtime, offset) -> what addr2line said
_said: Set[str] = set()             # warnings given once per process


def _say(what: str) -> None:
    if what not in _said:
        _said.add(what)
        warnings.warn(f"tinyprof: call sites: {what}", RuntimeWarning, stacklevel=4)


def parse_site(name: str) -> Optional[Tuple[str, Site]]:
    """``function (object+0xoffset)`` -> (function, (object, offset)); None
    for any other name. Linear in the name's length."""
    function, paren, rest = name.rpartition(" (")
    if not paren or not rest.endswith(")"):
        return None
    obj, plus, hexa = rest[:-1].rpartition("+0x")
    if not plus or not obj or not 0 < len(hexa) <= 16 or hexa.strip("0123456789abcdef"):
        return None
    return function, (obj, int(hexa, 16))


def objects(metadata: Mapping[str, object]) -> Dict[str, Tuple[int, int, str]]:
    """The ``site_objects`` metadata: object name -> (size, mtime_ns, path);
    malformed lines are skipped."""
    value = metadata.get("site_objects")
    found: Dict[str, Tuple[int, int, str]] = {}
    if not isinstance(value, str):
        return found
    for line in value.split("\n")[:MAX_OBJECTS]:
        parts = line.split("\t", 3)
        if len(parts) == 4 and parts[1].isdigit() and parts[2].isdigit():
            found[parts[0]] = (int(parts[1]), int(parts[2]), parts[3])
    return found


def _same_file(size: int, mtime: int, path: str) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size == size and st.st_mtime_ns == mtime


def _addr2line(tool: str, path: str, offsets: Sequence[int], timeout: float) -> Optional[Dict[int, Found]]:
    """offset -> (function, file:line) of the innermost of its inlined frames;
    None when addr2line failed (nothing to remember)."""
    try:
        out = subprocess.run([tool, "-a", "-f", "-C", "-i", "-e", path], capture_output=True, text=True,
                             errors="replace", timeout=timeout,
                             input="".join(f"0x{o:x}\n" for o in offsets)).stdout
    except (OSError, subprocess.SubprocessError) as e:
        _say(f"addr2line failed on {path} ({type(e).__name__}): names left as written")
        return None
    found: Dict[int, Found] = {}
    lines = out.split("\n")
    i = 0
    while i < len(lines):
        if not lines[i].startswith("0x"):
            i += 1
            continue
        try:
            offset = int(lines[i], 16)
        except ValueError:
            i += 1
            continue
        function, where = (lines[i + 1:i + 3] + ["??", "??:0"])[:2]
        file, _, line = where.partition(" ")[0].rpartition(":")
        found.setdefault(offset, ("" if function == "??" else function,
                                  f"{os.path.basename(file)}:{line}"
                                  if file not in ("", "??") and line.isdigit() and line != "0" else ""))
        i += 3
    return found


def resolve(files: Sequence[ParsedFile], metadata: Mapping[str, object]) -> None:
    """Rename the call sites in the files' name tables (before their callpaths
    are built). Two sites of one line keep their offsets, as
    ``function (file.c:line, object+0xoffset)``, to stay two callpaths."""
    known = objects(metadata)
    if not known:
        return
    parsed: Dict[str, Tuple[str, Site]] = {}
    for f in files:
        for name in f.names:
            if name not in parsed:
                p = parse_site(name)
                if p is not None and p[1][0] in known:
                    parsed[name] = p
    wanted: Dict[str, List[int]] = {}
    for _, (obj, offset) in parsed.values():
        wanted.setdefault(obj, []).append(offset)
    lines: Dict[Site, str] = {}
    budget, deadline = MAX_ADDRESSES, time.monotonic() + TIMEOUT
    for obj, offsets in sorted(wanted.items()):
        size, mtime, path = known[obj]
        if budget <= 0 or not _same_file(size, mtime, path):
            continue
        offsets = sorted(set(offsets))[:budget]
        budget -= len(offsets)
        todo = [o for o in offsets if (path, size, mtime, o) not in _cache]
        if todo:
            tool = shutil.which("addr2line")
            if tool is None:
                _say("no addr2line (binutils) on PATH: names left as object+offset")
                break
            if len(_cache) + len(todo) > MAX_ADDRESSES:
                _cache.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                _say("addr2line out of time: names left as written")
                break
            got = _addr2line(tool, path, todo, left)
            if got is not None:
                _cache.update(((path, size, mtime, o), got.get(o, ("", ""))) for o in todo)
        for o in offsets:
            function, where = _cache.get((path, size, mtime, o), ("", ""))
            if function:    # a static function gets its name, and its line with -g
                lines[(obj, o)] = f"{function} ({where or f'{obj}+0x{o:x}'})"
    uses: Dict[str, int] = {}
    for site in {site for _, site in parsed.values()}:
        if site in lines:
            uses[lines[site]] = uses.get(lines[site], 0) + 1
    renamed: Dict[str, str] = {}
    for name, (_, site) in parsed.items():
        line = lines.get(site)
        if line is not None:
            renamed[name] = line if uses[line] == 1 else f"{line[:-1]}, {site[0]}+0x{site[1]:x})"
    if renamed:
        for f in files:
            f.names = [renamed.get(n, n) for n in f.names]
