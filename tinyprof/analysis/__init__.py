"""The read side: a profile as a model (``Profile``), and what is computed
from it: per-rank aggregates, MPI tables, trace matching, wait states and the
critical path. No printing (views/ and converters/ do that); it imports only
format/."""

from ..errors import ConvertError

__all__ = ["ConvertError"]      # documented here too (docs/convert.md)
