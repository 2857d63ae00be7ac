"""The optional C extension (batched UDP I/O); everything else is in pyproject.toml.

`optional=True`: where it cannot be compiled (no compiler, not Linux) the
install still succeeds and the server uses its pure-Python UDP path.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("mcsdns.server._batchio", ["mcsdns/server/_batchio.c"], optional=True,
                             extra_compile_args=["-O2", "-Wall"])])
