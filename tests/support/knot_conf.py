"""knotd's configuration as a secondary of mcsdns for clusterset.local on loopback (used by
tests/nameserver/test_secondaries.py and bench/xfr.py)."""

from __future__ import annotations

from pathlib import Path


def secondary_conf(tmp: Path, port: int, primary: int, secret: str | None = None) -> str:
    """knotd in `tmp` listening on `port`, transferring the zone from mcsdns on `primary` and
    taking its NOTIFY; with `secret`, both signed with TSIG key xfr-key (hmac-sha256)."""
    key = "\n    key: xfr-key" if secret else ""
    keys = f"key:\n  - id: xfr-key\n    algorithm: hmac-sha256\n    secret: {secret}\n" if secret else ""
    return f"""server:
    rundir: "{tmp}"
    listen: 127.0.0.1@{port}
    udp-workers: 1
    tcp-workers: 1
    background-workers: 1
log:
  - target: stderr
    any: info
database:
    storage: "{tmp}"
{keys}remote:
  - id: primary
    address: 127.0.0.1@{primary}{key}
acl:
  - id: notify-from-primary
    address: 127.0.0.1{key}
    action: notify
template:
  - id: default
    storage: "{tmp}"
    zonefile-sync: -1
    zonefile-load: none
    journal-content: changes
zone:
  - domain: clusterset.local
    master: primary
    acl: notify-from-primary
"""
