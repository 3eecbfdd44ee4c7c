"""The read side: a profile as a model (``Profile``), and what is computed
from it: per-rank aggregates, MPI tables, trace matching, wait states and the
critical path. No printing (views/ and converters/ do that); it imports only
format/."""


class ConvertError(ValueError):
    """A profile that the chosen view or target cannot hold as it is."""
