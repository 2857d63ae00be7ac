"""The optional C extension; everything else is in pyproject.toml.

`mcsdns.transport._batchio`: batched UDP I/O and cache hits (the query path). `optional=True`:
where it cannot be compiled (no compiler, not Linux) the install still succeeds and the
server uses its pure-Python mirror (MCSDNS_BATCHIO=0 chooses that mirror where it is built).
"""

from setuptools import Extension, setup

FLAGS = ["-O2", "-Wall"]
setup(ext_modules=[
    Extension("mcsdns.transport._batchio", ["mcsdns/transport/_batchio.c"], optional=True,
              extra_compile_args=FLAGS),
])
