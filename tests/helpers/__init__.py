"""What the tests share, imported as ``helpers.<module>`` (pytest puts tests/ on
``sys.path``: tests/conftest.py lives there): the tools a test needs and what a
missing one does (``tools``, ``mpi``), the recorded profiles (``profiles``), the
hand-made and damaged files (``files``), the C++ programs (``native``), a real
Chromium (``browser``) and the POP and trace checks that Python and C++ share."""
