"""The optional C extensions; everything else is in pyproject.toml.

`mcsdns.transport._batchio`: batched UDP I/O and cache hits (the query path), reading kept
responses of `mcsdns.nameserver._cannedtype.Canned` (their layout: _cannedtype.h).
`optional=True`: where they cannot be compiled (no compiler, not Linux) the install still
succeeds and the server uses the pure-Python mirror (MCSDNS_BATCHIO=0 chooses that mirror
where it is built).
"""

from setuptools import Extension, setup

FLAGS = ["-O2", "-Wall"]
HEADER = ["mcsdns/nameserver/_cannedtype.h"]
setup(ext_modules=[
    Extension("mcsdns.nameserver._cannedtype", ["mcsdns/nameserver/_cannedtype.c"], depends=HEADER,
              optional=True, extra_compile_args=FLAGS),
    Extension("mcsdns.transport._batchio", ["mcsdns/transport/_batchio.c"], depends=HEADER,
              optional=True, extra_compile_args=FLAGS),
])
