"""Real secondaries (knotd, BIND named) transferring clusterset.local from a running mcsdns:
their TSIG key, configuration and process."""

from __future__ import annotations

import base64
import shutil
from collections.abc import Callable
from pathlib import Path

import dns.exception
import dns.message
import dns.query
import dns.rcode

from support.helpers import Server
from support.knot_conf import secondary_conf

ZONE = "clusterset.local."
SECRET = base64.b64encode(b"mcsdns-secondaries-test-key-4567").decode()
KEY = f"xfr-key:hmac-sha256:{SECRET}"


def knotd(tmp: Path, port: int, primary: int) -> list[str]:
    (tmp / "knot.conf").write_text(secondary_conf(tmp, port, primary, SECRET))
    return [unconfined("knotd", tmp), "-c", str(tmp / "knot.conf")]


class Secondary:
    """A real secondary server (knotd or named) transferring the zone from mcsdns."""

    def __init__(self, name: str, port: int, log: Path, primary: Server, mdir: Path) -> None:
        self.name, self.port, self.log, self.primary, self.mdir = name, port, log, primary, mdir

    def ask(self, name: str, rdtype: str, tries: int = 3) -> dns.message.Message:
        """The secondary's answer over TCP; asked again after a 3 s timeout (named runs one
        worker, -n 1, which on a loaded machine can stay busy that long right after a transfer)."""
        query = dns.message.make_query(name, rdtype)
        for _ in range(tries - 1):
            try:
                return dns.query.tcp(query, "127.0.0.1", port=self.port, timeout=3)
            except dns.exception.Timeout:
                continue
        return dns.query.tcp(query, "127.0.0.1", port=self.port, timeout=3)

    def serial(self) -> int | None:
        try:
            r = self.ask(ZONE, "SOA")
        except (OSError, dns.exception.DNSException):
            return None
        return int(r.answer[0][0].serial) if r.answer and r.rcode() == dns.rcode.NOERROR else None


def unconfined(binary: str, tmp: Path) -> str:
    """A copy of `binary` in tmp: AppArmor profiles (Debian/Ubuntu ship them for
    /usr/sbin/named and knotd) attach by path and would deny files in tmp."""
    path = shutil.which(binary)
    assert path is not None
    copy = tmp / binary
    shutil.copy2(path, copy)
    return str(copy)


def named(tmp: Path, port: int, primary: int) -> list[str]:
    (tmp / "named.conf").write_text(f"""controls {{ }};
options {{
    directory "{tmp}";
    pid-file "{tmp}/named.pid";
    session-keyfile "{tmp}/session.key";
    managed-keys-directory "{tmp}";
    listen-on port {port} {{ 127.0.0.1; }};
    listen-on-v6 {{ none; }};
    recursion no;
    dnssec-validation no;
    notify no;
    allow-query {{ any; }};
}};
key "xfr-key" {{ algorithm hmac-sha256; secret "{SECRET}"; }};
zone "clusterset.local" {{
    type secondary;
    primaries port {primary} {{ 127.0.0.1 key "xfr-key"; }};
    file "clusterset.local.db";
    allow-notify {{ 127.0.0.1; }};
}};
""")
    # -g: foreground, logs to stderr; runs as the invoking user (root in CI) in its own dir
    return [unconfined("named", tmp), "-g", "-n", "1", "-c", str(tmp / "named.conf")]


SECONDARIES: dict[str, Callable[[Path, int, int], list[str]]] = {"knotd": knotd, "named": named}
