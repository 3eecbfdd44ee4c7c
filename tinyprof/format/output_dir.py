"""The output directory: where the files of flushes and snapshots go.

``<outdir>/<stem>.<i>-of-<n>.tp`` is the set of the latest flush;
``<outdir>/snapshots/<k>/<stem>.<rank>-of-<P>.tp`` the files of snapshot k
(docs/format.md, "Files of a profile" and "Snapshots"). Every file is written
atomically; writers never raise ``OSError``: they return why they could not.
Several runs may write into one directory: every set is told apart by the
``run`` and ``set`` lines of its files, and ``<outdir>/<stem>.run`` names the
newest run that started there, so that reading takes the newest run's data.
"""
from __future__ import annotations

import contextlib
import os
import re
import stat
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from ..errors import FormatError, excerpt, shown_path

SUFFIX = ".tp"
SNAPSHOTS = "snapshots"       # subdirectory of an output directory holding the snapshots
_SET_RE = re.compile(r"^(?P<name>.*)\.(?P<index>\d+)-of-(?P<count>\d+)" + re.escape(SUFFIX) + "$")


def file_name(name: str, index: int, count: int) -> str:
    """``<name>.<index>-of-<count>.tp``, index zero-padded to the width of count."""
    safe = re.sub(r"[^\w.+-]", "_", name) or "profile"
    return f"{safe}.{index:0{len(str(count))}d}-of-{count}{SUFFIX}"


def set_key(name: str) -> Optional[Tuple[str, int]]:
    """The (stem, file count) of the set that the file named ``name`` (no
    directory) belongs to, None when it is not a set file's name."""
    m = _SET_RE.match(name)
    return (m["name"], int(m["count"])) if m else None


def write_atomic(path: str, data: bytes) -> None:
    """One write to a temporary file, then rename: readers never see half a
    file, and a failure leaves no temporary file behind. The temporary file
    is created exclusively under a name nobody can predict (O_EXCL and
    O_NOFOLLOW): a symlink planted there cannot redirect the write."""
    for attempt in range(16):
        tmp = f"{path}.tmp{os.getpid()}-{os.urandom(6).hex()}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            break
        except FileExistsError:     # one of 2^48 names taken: draw another
            if attempt == 15:
                raise
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_file(directory: str, path: str, data: bytes) -> Optional[str]:
    """Create ``directory`` and write ``path`` in it atomically; why not, if it
    cannot (any ``OSError``: the callers warn, and the application goes on)."""
    try:
        os.makedirs(directory, exist_ok=True)
        write_atomic(path, data)
    except OSError as e:
        return str(e.strerror or e)
    return None


def write_set_file(directory: str, stem: str, index: int, count: int,
                   data: bytes) -> Optional[str]:
    """Write file ``index`` of a ``count``-file set into ``directory``
    (atomically, creating the directory); ``"<path>: <why>"`` if it cannot."""
    path = set_file(directory, stem, index, count)
    failure = write_file(directory, path, data)
    return f"{shown_path(path)}: {failure}" if failure else None


def set_file(outdir: str, stem: str, index: int, count: int) -> str:
    """Path of file ``index`` of a ``count``-file set in ``outdir``."""
    return os.path.join(outdir, file_name(stem, index, count))


def profile_files(path: str) -> List[str]:
    """The files of the one profile set at ``path`` (an output directory, a
    snapshot directory, or one file of a set), in index order; FormatError if
    there is none, several, or a file is missing."""
    if os.path.isdir(path):
        sets: Dict[Tuple[str, int], List[str]] = {}
        for entry in sorted(os.listdir(path)):
            m = _SET_RE.match(entry)
            if m:
                sets.setdefault((m["name"], int(m["count"])), []).append(entry)
        if not sets:
            raise FormatError(path, None, f"no tinyprof profile (*{SUFFIX}) in this directory")
        if len(sets) > 1:
            names = ", ".join(sorted(f"{n} ({c} files)" for n, c in sets))
            raise FormatError(path, None, f"several profiles in this directory: {excerpt(names, 400)}; "
                                          "pass one file of the one you want")
        (name, count), = sets
        directory = path
    else:
        if not os.path.exists(path):
            raise FormatError(path, None, "no such file or directory")
        m = _SET_RE.match(os.path.basename(path))
        if not m:
            return [path]           # a lone file under another name: read it alone
        name, count, directory = m["name"], int(m["count"]), os.path.dirname(path) or "."
    expected = [os.path.join(directory, file_name(name, i, count)) for i in range(count)]
    missing = [p for p in expected if not os.path.exists(p)]
    if missing:
        raise FormatError(missing[0], None, f"missing: profile has {count} files, "
                                            f"{len(missing)} not found")
    return expected


def complete_files(directory: str) -> Optional[List[str]]:
    """The files of the one whole profile in ``directory``, else None."""
    try:
        return profile_files(directory)
    except (FormatError, OSError):
        return None


class Head(NamedTuple):
    """The run and set of a version-2 file, from its first four lines."""

    run: str
    kind: str                   # "flush" or "snapshot"
    number: int
    base: Optional[int]         # a delta snapshot's ``over`` number


class Found(NamedTuple):
    """A complete set on disk: the flushed one (``number`` None) or a snapshot."""

    files: List[str]
    run: Optional[str]          # None: a file whose head cannot say (version 1, broken)
    number: Optional[int]
    mtime: int


class Choice(NamedTuple):
    """What ``read(outdir)`` reads (:func:`newest`)."""

    files: List[str]
    number: Optional[int]       # snapshot number, None for the flushed set
    note: Optional[str]         # why this is not the newest run's data, if it is not
    traced: Optional[List[str]]     # the same run's older flushed set (its trace)


class Memo:
    """What a scan of an output directory learnt of each file: its head, and
    the run of the complete chain of deltas it ends (None: broken)."""

    def __init__(self) -> None:
        self.heads: Dict[str, Optional[Head]] = {}
        self.runs: Dict[str, Optional[str]] = {}


def open_regular(path: str) -> int:
    """A read-only descriptor of ``path``, which must be a regular file
    without holes: a FIFO or a device is a FormatError, never a hang
    (O_NONBLOCK), and a sparse file one too, never gigabytes of zeros read
    (no writer leaves a hole). OSError if it cannot be opened."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FormatError(path, None, "not a regular file")
        hole = _first_hole(fd, st.st_size)
        if hole < st.st_size:
            raise FormatError(path, None, f"a sparse file (a hole at byte {hole} of "
                                          f"{st.st_size}): not a profile a writer made")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _first_hole(fd: int, size: int) -> int:
    try:
        hole = os.lseek(fd, 0, os.SEEK_HOLE)
    except (OSError, AttributeError):      # no SEEK_HOLE here: a file of data only
        hole = size
    os.lseek(fd, 0, os.SEEK_SET)
    return hole


# A file's head from version 2 on (run and set lines), whatever the writer's version.
_HEAD_RE = re.compile(rb"tinyprof [2-9][0-9]*\nname [^\n]*\nrun ([0-9a-f]{16})\n"
                      rb"set (flush|snapshot) ([0-9]+)(?: over ([0-9]+))?\n")
_HEAD_LIMIT = 1 << 20       # a header line longer than this is not a writer's


def head(path: str, memo: Optional[Memo] = None) -> Optional[Head]:
    """The run and set of the file ``path``; None if it is missing, not a
    regular file, or unlike a file of version 2 or later. ``memo`` caches it by path."""
    if memo is not None and path in memo.heads:
        return memo.heads[path]
    got = None
    try:
        fd = open_regular(path)
    except (OSError, FormatError):
        fd = -1
    if fd >= 0:
        try:
            data = b""
            while data.count(b"\n") < 4 and len(data) < _HEAD_LIMIT:
                more = os.read(fd, 4096)
                if not more:
                    break
                data += more
        except OSError:
            data = b""
        finally:
            os.close(fd)
        m = _HEAD_RE.match(data)
        if m is not None:
            got = Head(m[1].decode(), m[2].decode(), int(m[3]),
                       None if m[4] is None else int(m[4]))
    if memo is not None:
        memo.heads[path] = got
    return got


def _sets(directory: str) -> List[List[str]]:
    """The sets in ``directory`` of which every file is there, by name."""
    try:
        entries = sorted(os.listdir(directory))
    except OSError:
        return []
    sets: Dict[Tuple[str, int], List[str]] = {}
    for entry in entries:
        m = _SET_RE.match(entry)
        if m:
            sets.setdefault((m["name"], int(m["count"])), []).append(entry)
    return [[os.path.join(directory, file_name(name, i, count)) for i in range(count)]
            for (name, count), got in sets.items()
            if got == [file_name(name, i, count) for i in range(count)]]


def _step(outdir: str, path: str, number: int, memo: Memo) -> Optional[Tuple[Head, str]]:
    """The head of snapshot ``number``'s file ``path`` and the path of the
    file it is a delta over (its own, for a full one); None if the file does
    not say it is snapshot ``number`` (a renamed directory) or is unlike one."""
    h = head(path, memo)
    if h is None or h.kind != "snapshot" or h.number != number or \
            (h.base is not None and h.base >= number):
        return None
    if h.base is None:
        return h, path
    return h, os.path.join(snapshot_dir(outdir, h.base), os.path.basename(path))


def _run_of(outdir: str, k: int, path: str, memo: Memo) -> Optional[str]:
    """The run of file ``path`` of snapshot ``k`` if its chain of deltas is
    whole and of that run down to a full file, else None. Each file is
    walked once per ``memo``: a scan of n snapshots costs O(n), not O(n x chain)."""
    trail: List[Tuple[str, str]] = []       # (path, run) walked down, newest first
    number = k
    while path not in memo.runs:
        got = _step(outdir, path, number, memo)
        if got is None:
            memo.runs[path] = None
            break
        h, below = got
        if below == path:                   # a full file
            memo.runs[path] = h.run
            break
        trail.append((path, h.run))
        path, number = below, h.base or 0
    run = memo.runs[path]
    for above, own in reversed(trail):
        run = run if run == own else None
        memo.runs[above] = run
    return run


def _walk(outdir: str, k: int, files: List[str], memo: Memo) -> Optional[str]:
    """The run of snapshot set ``files`` (in directory ``k``) if it is
    complete: every file says ``snapshot k`` of one run, and for each delta
    (``over j``) the file of the same name in directory ``j`` is snapshot
    ``j`` of that run, and so on down to a full one. None if any of that
    fails: a renamed directory, files of two runs, a chain that reaches
    another run's file."""
    runs = {_run_of(outdir, k, path, memo) for path in files}
    return runs.pop() if len(runs) == 1 else None


def _needed(outdir: str, k: int, files: List[str], memo: Memo) -> List[int]:
    """The snapshot numbers reading complete set ``files`` of ``k`` takes, oldest first."""
    needed = {k}
    for path in files:
        number = k
        while True:
            got = _step(outdir, path, number, memo)
            if got is None or got[1] == path:
                break
            path, number = got[1], got[0].base or 0
            needed.add(number)
    return sorted(needed)


def _found_snapshots(outdir: str, memo: Memo, until: Optional[str] = None) -> List[Found]:
    """The complete snapshot sets below ``outdir``, newest number first;
    with ``until``, only down to the newest one of that run."""
    found = []
    for k in reversed(snapshot_numbers(outdir)):
        for files in _sets(snapshot_dir(outdir, k)):
            run = _walk(outdir, k, files, memo)
            if run is not None:
                found.append(Found(files, run, k, _mtime(files)))
                if run == until:
                    return found
    return found


def chain(outdir: str, k: int, memo: Optional[Memo] = None, run: Optional[str] = None
          ) -> Optional[List[int]]:
    """The snapshots that reading snapshot ``k`` (of run ``run``, None: of the
    run whose set there is newest) takes, oldest first; None if it is not
    complete. ``memo`` caches each file's head across calls."""
    memo = Memo() if memo is None else memo
    best: Optional[Tuple[int, List[str]]] = None
    for files in _sets(snapshot_dir(outdir, k)):
        got = _walk(outdir, k, files, memo)
        if got is not None and run in (None, got):
            mtime = _mtime(files)
            if best is None or mtime > best[0]:
                best = mtime, files
    return None if best is None else _needed(outdir, k, best[1], memo)


RUN_FILE = ".run"       # <outdir>/<stem>.run: the id of the newest run that started here


def mark_run(outdir: str, stem: str, run: str) -> None:
    """A run starting: if ``outdir`` exists (an earlier run's files may be
    there), record its id in ``<outdir>/<stem>.run``, so that a reader can
    tell when this run left no complete profile. A new directory needs no
    marker and is not created before the first write; failures are ignored
    (the first write says why it cannot write)."""
    if os.path.isdir(outdir):
        with contextlib.suppress(OSError):
            write_atomic(os.path.join(outdir, _safe(stem) + RUN_FILE), f"run {run}\n".encode())


def _marked_run(outdir: str) -> Optional[str]:
    """The run id of the newest run marker in ``outdir`` (None: none)."""
    best: Optional[Tuple[int, str]] = None
    try:
        entries = [e for e in os.listdir(outdir) if e.endswith(RUN_FILE)]
    except OSError:
        return None
    for entry in entries:
        path = os.path.join(outdir, entry)
        try:
            fd = open_regular(path)
        except (OSError, FormatError):
            continue
        try:
            data, mtime = os.read(fd, 64), os.fstat(fd).st_mtime_ns
        except OSError:
            continue
        finally:
            os.close(fd)
        m = re.fullmatch(rb"run ([0-9a-f]{16})\n", data)
        if m and (best is None or mtime > best[0]):
            best = mtime, m[1].decode()
    return None if best is None else best[1]


def _what(found: Found) -> str:
    kind = "its flushed profile" if found.number is None else f"its snapshot {found.number}"
    return f"run {found.run or '(unknown)'}'s data ({kind})"


def _candidates(outdir: str, memo: Memo, every: bool = False
                ) -> Tuple[List[Found], Optional[str], Optional[str]]:
    """The complete sets in ``outdir``, the run whose sets ``read`` takes,
    and the newest run if that is not it (None if it is). Without ``every``,
    the snapshots only down to the marked run's newest."""
    marked = _marked_run(outdir)
    found = _found_snapshots(outdir, memo, None if every else marked)
    flushed = complete_files(outdir)
    if flushed is not None:
        h = head(flushed[0], memo)
        found.append(Found(flushed, None if h is None else h.run, None, _mtime(flushed)))
    if not found:
        return found, None, None
    runs = {f.run for f in found}
    if marked in runs:
        return found, marked, None
    return found, max(found, key=lambda f: f.mtime).run, marked


def newest(path: str) -> Choice:
    """The newest complete data of the newest run at ``path`` (an output
    directory; a snapshot directory or a file is read as it is).

    The newest run is the one whose marker (``<stem>.run``) is newest; when
    it left no complete set, the run of the newest set, by the modification
    time of its newest file, with a note saying so. Of that run, its newest
    complete snapshot or its flushed set, whichever was completed last. Sets
    of other runs (an earlier run that used the directory, even with higher
    snapshot numbers) are never taken for it."""
    if not os.path.isdir(path):
        return Choice(profile_files(path), None, None, None)
    found, run, newer = _candidates(path, Memo())
    if not found:
        return Choice(profile_files(path), None, None, None)
    ours = [f for f in found if f.run == run]
    snaps = [f for f in ours if f.number is not None]
    flushed = next((f for f in ours if f.number is None), None)
    latest = max(snaps, key=lambda f: f.number or 0) if snaps else None
    # the later completed; on a tie, the flushed set
    pick = max((f for f in (flushed, latest) if f is not None),
               key=lambda f: (f.mtime, f.number is None))
    note = None
    if newer is not None:
        note = (f"the newest run here, {newer}, has no complete profile (it still runs, "
                "or was killed before its first flush or snapshot completed): "
                f"read {_what(pick)} instead, an earlier run's")
    return Choice(pick.files, pick.number, note,
                  flushed.files if flushed is not None and pick is not flushed else None)


def snapshot_files(outdir: str, k: int) -> List[str]:
    """The files of snapshot ``k``: of the run :func:`newest` reads, if that
    run has a complete snapshot ``k``; else of the newest complete set in its
    directory. FormatError (naming the problem) if it has none."""
    found, run, _ = _candidates(outdir, Memo(), every=True)
    sets = [f for f in found if f.number == k]
    if not sets:
        return profile_files(snapshot_dir(outdir, k))
    return next((f for f in sets if f.run == run), max(sets, key=lambda f: f.mtime)).files


def complete_snapshots(outdir: str) -> List[int]:
    """Numbers of the complete snapshots of the run :func:`newest` reads,
    oldest first: all their files there, and the snapshots their deltas build on too."""
    found, run, _ = _candidates(outdir, Memo(), every=True)
    return sorted(f.number for f in found if f.number is not None and f.run == run)


def _mtime(paths: List[str]) -> int:
    return max(os.stat(p).st_mtime_ns for p in paths)


def _safe(stem: str) -> str:
    return file_name(stem, 0, 1)[:-len(".0-of-1" + SUFFIX)]


def stale_sets(outdir: str, stem: str, count: int) -> List[str]:
    """Files of older sets of profile ``stem`` in ``outdir`` whose file count
    is not ``count``: they must go, or ``read(outdir)`` finds two profiles."""
    safe = _safe(stem)
    try:
        entries = os.listdir(outdir)
    except OSError:
        return []
    matches = ((entry, _SET_RE.match(entry)) for entry in entries)
    return [os.path.join(outdir, entry) for entry, m in matches
            if m and m["name"] == safe and int(m["count"]) != count]


def remove(path: str) -> None:
    """Remove a file that another process may have removed already."""
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def snapshot_dir(outdir: str, k: int) -> str:
    """Directory of snapshot ``k``."""
    return os.path.join(outdir, SNAPSHOTS, f"{k:06d}")


def snapshot_is_complete(outdir: str, k: int) -> bool:
    return chain(outdir, k) is not None


def snapshot_numbers(outdir: str) -> List[int]:
    """Numbers of the snapshot directories, complete or not, oldest first."""
    try:
        entries = os.listdir(os.path.join(outdir, SNAPSHOTS))
    except OSError:
        return []
    return sorted(int(e) for e in entries if e.isdigit())


def prune_snapshots(outdir: str, run: str) -> None:
    """keep="last": remove every snapshot file of run ``run`` older than its
    newest complete snapshot that reading that one does not take (its chain
    of deltas stays). Other runs' files are never touched."""
    memo = Memo()
    numbers = snapshot_numbers(outdir)
    for k in reversed(numbers):
        needed = chain(outdir, k, memo, run)
        if needed is not None:
            for j in numbers:
                if j < k and j not in needed:
                    _remove_run(snapshot_dir(outdir, j), run, memo)
            return


def _remove_run(directory: str, run: str, memo: Memo) -> None:
    """Remove the files of run ``run`` (temporary ones too) from ``directory``,
    and the directory once empty."""
    try:
        entries = os.listdir(directory)
    except OSError:
        return
    for entry in entries:
        path = os.path.join(directory, entry)
        h = head(path, memo)
        if h is not None and h.run == run:
            with contextlib.suppress(OSError):
                os.remove(path)
    with contextlib.suppress(OSError):
        os.rmdir(directory)


def holds_run(directory: str, run: str) -> bool:
    """Whether a file of run ``run`` is in ``directory`` (a snapshot it started)."""
    try:
        entries = os.listdir(directory)
    except OSError:
        return False
    return any(getattr(head(os.path.join(directory, e)), "run", None) == run
               for e in entries if _SET_RE.match(e))


def runs_in(paths: Sequence[str]) -> List[str]:
    """The runs named by ``paths``: a directory of runs (one holding run
    output directories, or the files of several profiles) gives each of
    them, in name order; any other path is one run. In a directory of runs,
    a subdirectory holding no profile (``logs/``, ``scripts/``) is no run:
    left out; subdirectories but no run in them is a FormatError."""
    out: List[str] = []
    for path in (os.fspath(p) for p in paths):
        out.extend(_directory_of_runs(path) or [path])
    return out


def _directory_of_runs(path: str) -> Optional[List[str]]:
    """The runs in ``path`` if it is a directory of runs, else None."""
    if not os.path.isdir(path) or os.path.isdir(os.path.join(path, SNAPSHOTS)):
        return None
    entries = sorted(os.listdir(path))
    dirs = [os.path.join(path, e) for e in entries if os.path.isdir(os.path.join(path, e))]
    sets: Dict[Tuple[str, int], str] = {}       # one file per set: reading takes its siblings
    for e in entries:
        m = set_key(e)
        if m is not None:
            sets.setdefault(m, os.path.join(path, e))
    runs = [d for d in dirs if _holds_profile(d)]
    if not runs and len(sets) == 1:
        return None                             # one run's output directory
    runs += sets.values()
    if not runs and dirs:
        raise FormatError(path, None, f"no run in it: none of its {len(dirs)} subdirectories "
                                      f"holds a profile ({SUFFIX} files or {SNAPSHOTS}/)")
    return runs or None                         # empty: reading says so


def _holds_profile(directory: str) -> bool:
    """Whether ``directory`` is a run's output directory: a set file in it, or snapshots."""
    if os.path.isdir(os.path.join(directory, SNAPSHOTS)):
        return True
    try:
        return any(set_key(e) is not None for e in os.listdir(directory))
    except OSError:                             # unreadable: a run, which reading names
        return True
