"""How every tinyprof command ends: its status, and one line on stderr for bad input.

Shared by ``cli`` and ``tune`` (``python -m tinyprof.tune``), so that neither imports the other.
"""
from __future__ import annotations

import argparse
import sys

from .errors import ConvertError, FormatError

# The extra that installs an optional package, where it is not hatchet's or CallFlow's.
EXTRAS = {"protobuf": "pprof", "thicket": "thicket"}


def run(prog: str, args: argparse.Namespace) -> int:
    """Run ``args.run(args)``; bad input, an unwritable output or a missing
    extra end with one line naming the file and status 2 (1 for an extra)."""
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
