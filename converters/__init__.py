"""Converters from tinyprof profiles to other tools' formats, one module per target."""
