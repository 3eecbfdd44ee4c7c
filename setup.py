"""Build the optional C core of the annotation hot path.

The extension is optional: if it cannot be compiled, tinyprof installs and runs
on its pure-Python fallback (see tinyprof/_annotate.py).
"""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tinyprof._core",
            sources=["tinyprof/_core.c"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)
