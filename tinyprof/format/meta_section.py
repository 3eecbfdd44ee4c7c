"""The ``meta`` section: the run's metadata (docs/format.md, "The meta section").

Key/value pairs about the run as a whole (start time, command line, hosts,
user keys), written in file 0 of every set. One line per key, sorted by key:

    <key>|<type>|<value>

``type`` is ``s`` (a string, escaped as names are), ``i`` (a signed 64-bit
integer, spelled as times are) or ``f`` (a double, spelled as metric values
are). The C++ writer (``native/include/tinyprof/detail/metadata.hpp``) writes
the same bytes.
"""
from __future__ import annotations

import math
import re
from typing import Dict, List, Mapping, Optional, Union

from ..errors import FormatError, excerpt
from .encoding import escape, format_value, unescape

Value = Union[str, int, float]

KEY_RE = re.compile("[A-Za-z_][A-Za-z0-9_.-]{0,63}")
MAX_ENTRIES = 1024
MAX_VALUE = 1 << 20         # bytes of a value as written (escaped)
_INT_RE = re.compile(rb"0|-?[1-9][0-9]{0,18}")
_LINE_RE = re.compile(rb"([A-Za-z_][A-Za-z0-9_.-]{0,63})\|([sif])\|(.*)", re.S)


def problem(key: object, value: object) -> Optional[str]:
    """Why ``key``/``value`` cannot be an entry (None: it can). Used for
    ``Profiler(metadata=...)`` and ``TINYPROF_METADATA`` alike."""
    if not isinstance(key, str) or not KEY_RE.fullmatch(key):
        return (f"metadata key {excerpt(key) if isinstance(key, str) else repr(type(key).__name__)}"
                " must match [A-Za-z_][A-Za-z0-9_.-]* (at most 64 characters)")
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return f"metadata {key!r}: a value must be a str, int or float, not {type(value).__name__}"
    if isinstance(value, int) and not -2**63 <= value < 2**63:
        return f"metadata {key!r}: an int value must fit in 64 bits"
    if isinstance(value, str) and len(_text(value)) > MAX_VALUE:
        return f"metadata {key!r}: the value is longer than {MAX_VALUE} bytes"
    return None


def _text(value: str) -> bytes:
    return escape(value).encode("utf-8", "surrogatepass")


def encode(entries: Mapping[str, Value]) -> bytes:
    """The payload of ``entries`` (keys and types checked by :func:`problem`),
    b"" for none: writers write no section then. A string over the bound (an
    automatic ``command``, ``hostnames`` or ``rank_hosts`` of a huge run) and the keys past
    the first ``MAX_ENTRIES`` are left out: the file stays readable."""
    lines: List[bytes] = []
    for key in sorted(entries):
        value = entries[key]
        if len(lines) == MAX_ENTRIES:
            break
        if isinstance(value, str):
            text = _text(value)
            if len(text) <= MAX_VALUE:
                lines.append(b"%s|s|%s\n" % (key.encode(), text))
        elif isinstance(value, int):
            lines.append(b"%s|i|%d\n" % (key.encode(), value))
        else:
            lines.append(b"%s|f|%s\n" % (key.encode(), format_value(value).encode()))
    return b"".join(lines)


def parse(payload: bytes, path: str, line: int) -> Dict[str, Value]:
    """The entries of a payload that starts on ``line`` of file ``path``;
    FormatError naming the line on anything but what :func:`encode` writes."""
    out: Dict[str, Value] = {}
    if not payload:
        return out
    if not payload.endswith(b"\n"):
        raise FormatError(path, line + payload.count(b"\n"),
                          "meta section: the last entry has no newline")
    rows = payload[:-1].split(b"\n")
    if len(rows) > MAX_ENTRIES:
        raise FormatError(path, line, f"meta section: {len(rows)} entries, more than {MAX_ENTRIES}")
    previous = b""
    for i, row in enumerate(rows):
        def fail(what: str, at: int = line + i) -> FormatError:
            return FormatError(path, at, f"meta section: {what}")
        m = _LINE_RE.fullmatch(row)
        if m is None:
            raise fail(f"expected '<key>|<s, i or f>|<value>', found {excerpt(row, 40)}")
        key, kind, token = m[1], m[2], m[3]
        if key <= previous:
            raise fail(f"key {excerpt(key.decode())} "
                       f"{'given twice' if key == previous else 'out of order'}")
        previous = key
        if len(token) > MAX_VALUE:
            raise fail(f"value of {key.decode()!r} longer than {MAX_VALUE} bytes")
        value: Value
        if kind == b"s":
            try:
                text = token.decode("utf-8", "surrogatepass")
                value = unescape(text)
            except (UnicodeDecodeError, ValueError) as e:
                raise fail(f"bad string value of {key.decode()!r}: "
                           f"{'not valid UTF-8' if isinstance(e, UnicodeDecodeError) else e}") \
                    from None
            if escape(value) != text:
                raise fail(f"value of {key.decode()!r} not canonically escaped: {excerpt(text, 40)}")
        elif kind == b"i":
            if not _INT_RE.fullmatch(token) or not -2**63 <= int(token) < 2**63:
                raise fail(f"bad integer value of {key.decode()!r}: {excerpt(token, 40)}")
            value = int(token)
        else:
            try:
                value = float(token)
            except ValueError:
                value = math.nan
            if format_value(value).encode() != token:
                raise fail(f"bad float value of {key.decode()!r}: {excerpt(token, 40)}")
        out[key.decode()] = value
    return out
