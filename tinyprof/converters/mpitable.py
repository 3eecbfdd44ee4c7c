"""The documented path of the ``tinyprof mpi`` tables, which are a view:
:mod:`tinyprof.views.mpi`."""
from ..views.mpi import *  # noqa: F403
from ..views.mpi import __all__  # noqa: F401
