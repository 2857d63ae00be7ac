"""Configuration errors, shared by every binary: one line naming the flag, the value and
the reason, and exit status 2 (never a traceback)."""

from __future__ import annotations

import os

EXIT_CONFIG = 2


class ConfigError(Exception):
    """A configuration mistake found while starting; the message names the flag, the value
    and the reason."""


def os_reason(e: OSError) -> str:
    """An OSError's reason without its errno and path: "Address already in use"."""
    if e.errno is not None and e.errno > 0:
        return os.strerror(e.errno)
    return e.strerror or str(e)


def show_addr(host: str, port: int) -> str:
    """HOST:PORT as given on the command line ([v6]:PORT for IPv6)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
