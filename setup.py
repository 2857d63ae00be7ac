"""The optional C extensions; everything else is in pyproject.toml.

- `mcsdns.server._batchio`: batched UDP I/O and cache hits (the query path);
- `mcsdns.data._keep`: JSON decoded keeping only a model's declared fields (the load path);
- `mcsdns.data._parse`: plain valid ServiceImports and EndpointSlices parsed (the load path);

`optional=True`: where one cannot be compiled (no compiler, not Linux) the install
still succeeds and the server uses its pure-Python mirror.
"""

from setuptools import Extension, setup

FLAGS = ["-O2", "-Wall"]
setup(ext_modules=[
    Extension("mcsdns.server._batchio", ["mcsdns/server/_batchio.c"], optional=True, extra_compile_args=FLAGS),
    Extension("mcsdns.data._keep", ["mcsdns/data/_keep.c"], optional=True, extra_compile_args=FLAGS),
    Extension("mcsdns.data._parse", ["mcsdns/data/_parse.c"], optional=True, extra_compile_args=FLAGS,
              depends=["mcsdns/_slots.h"]),
])
