"""`mcsdns diagnose`'s look at each cluster's credential, read from its kubeconfig
(`kube.apiclient.expiry`): WARN when it is due for renewal (less than a fifth of its lifetime left)
or expired, OK with its expiry otherwise; no line when the credential does not say."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime

from ..kube.apiclient.client import Client
from ..kube.apiclient.expiry import due, of_identity
from .checks import OK, WARN, Result


def _when(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _left(seconds: float) -> str:
    return f"{seconds / 86400:.1f} days" if seconds >= 86400 else f"{seconds / 3600:.1f} hours"


def credential_checks(clusters: Mapping[str, Client], now: float | None = None) -> Iterator[Result]:
    """One line per cluster whose credential says when it expires."""
    now = time.time() if now is None else now
    for name, c in clusters.items():
        v = of_identity(c.transport.cfg.identity)
        if v is None:
            continue
        left = v.expires - now
        if left <= 0:
            yield Result(WARN, "credential", name, "", f"expired at {_when(v.expires)}: the API server "
                         "refuses it (401); for a joined member run `mcsdns join` again")
        elif due(v, now):
            yield Result(WARN, "credential", name, "", f"expires at {_when(v.expires)}, in {_left(left)}: "
                         "renew it (for a joined member run `mcsdns join` again)")
        else:
            yield Result(OK, "credential", name, "", f"expires at {_when(v.expires)}, in {_left(left)}")
