"""How every tinyprof command ends: its status, and one line on stderr for bad input.

Shared by the commands and ``python -m tinyprof.tune``.
"""
from __future__ import annotations

import argparse
import sys

# The extra that installs an optional package, where it is not hatchet's or CallFlow's.
EXTRAS = {"protobuf": "pprof", "thicket": "thicket"}


def run(prog: str, args: argparse.Namespace) -> int:
    """Run ``args.run(args)``; bad input, an unwritable output or a missing
    extra end with one line naming the file and status 2 (1 for an extra)."""
    # here, not at the top: the parsers are built without loading a layer
    from ..errors import ConvertError, FormatError

    try:
        return args.run(args)
    except (FormatError, ConvertError) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:         # `tinyprof show ... | head`
        return 0
    except OSError as e:            # an output that cannot be written
        where = getattr(args, "output", None) or e.filename
        print(f"{prog}: {where}: {e.strerror or e}" if where else f"{prog}: {e}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as e:
        extra = EXTRAS.get(e.name or "", "hatchet")
        print(f"{prog}: needs the Python package {e.name!r}: pip install 'tinyprof[{extra}]'",
              file=sys.stderr)
        return 1


def echo(text: str) -> None:
    """Print ``text``, which names paths the user gave: a path of non-UTF-8 bytes
    holds lone surrogates, which a strict stdout cannot encode: those print as ``\\udcff``."""
    try:
        print(text, flush=True)
    except UnicodeEncodeError:
        print(text.encode("utf-8", "backslashreplace").decode("utf-8"), flush=True)
