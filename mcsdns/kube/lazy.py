"""The `kubernetes` package, its parts loaded as they are used.

The package's own `__init__` imports every part (client, config, dynamic with
jsonschema, watch, stream, utils, leader election, informer): about 70 ms of every
start, for parts mcsdns never uses. `install` puts the package in place without running
that `__init__`: `import kubernetes.client`, `from kubernetes import config` and
`kubernetes.watch` load just that part; any other name of the package (`__version__`)
runs the package's own `__init__` first, so every name it publishes is still there.
Nothing is done when `kubernetes` is imported already or not installed."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType
from typing import Any

PARTS = frozenset({"aio", "client", "config", "dynamic", "informer", "leaderelection", "stream", "utils",
                   "watch"})


def install() -> ModuleType | None:
    """The lazily loaded package (None when it was imported already or is missing)."""
    if "kubernetes" in sys.modules:
        return None
    spec = importlib.util.find_spec("kubernetes")
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return None
    mod = importlib.util.module_from_spec(spec)
    loader, done = spec.loader, list[bool]()

    def __getattr__(name: str) -> Any:
        if name in PARTS:
            return importlib.import_module(f"kubernetes.{name}")
        if not done:  # the package as published: run its own __init__ once
            done.append(True)
            loader.exec_module(mod)
            if name in mod.__dict__:
                return mod.__dict__[name]
        raise AttributeError(f"module 'kubernetes' has no attribute {name!r}")

    mod.__getattr__ = __getattr__  # type: ignore[method-assign]
    sys.modules["kubernetes"] = mod
    return mod
