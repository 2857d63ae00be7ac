"""ClusterSetIP allocation from the --clusterset-cidr ranges.

One address per IP family per service, the lowest free one. An allocation is
kept for as long as the service is imported; existing ServiceImports are
adopted first (`adopt`), so a restarted controller keeps every address.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from ..kube.apiclient.keys import Key

Net = ipaddress.IPv4Network | ipaddress.IPv6Network

FAMILY = {4: "IPv4", 6: "IPv6"}


class Exhausted(Exception):
    """No free address is left in any range of a family."""


class Allocator:
    """ClusterSetIPs from --clusterset-cidr: one address per family per service, kept while it exists."""

    def __init__(self, cidrs: Iterable[str]) -> None:
        self.nets: list[Net] = [ipaddress.ip_network(c, strict=False) for c in cidrs]
        self.by_key: dict[Key, dict[str, str]] = {}  # key -> family -> address
        self.used: dict[str, Key] = {}  # address -> key

    def families(self) -> list[str]:
        """Families with a range, in the order the ranges were given."""
        out: list[str] = []
        for n in self.nets:
            if FAMILY[n.version] not in out:
                out.append(FAMILY[n.version])
        return out

    def _in_range(self, ip: str) -> str | None:
        try:
            a = ipaddress.ip_address(ip)
        except ValueError:
            return None
        if any(a in n for n in self.nets if n.version == a.version):
            return FAMILY[a.version]
        return None

    def adopt(self, key: Key, ips: Iterable[str]) -> None:
        """Keep addresses a ServiceImport already has, when in range and free."""
        mine = self.by_key.setdefault(key, {})
        for ip in ips:
            fam = self._in_range(ip)
            if fam is None or fam in mine or self.used.get(ip, key) != key:
                continue
            mine[fam] = ip
            self.used[ip] = key
        if not mine:
            del self.by_key[key]

    def _free(self, version: int) -> str:
        for n in self.nets:
            if n.version != version:
                continue
            hosts = n.hosts() if n.num_addresses > 2 else iter(n)
            for a in hosts:
                if str(a) not in self.used:
                    return str(a)
        raise Exhausted(f"no free {FAMILY[version]} ClusterSetIP left")

    def get(self, key: Key, families: Iterable[str]) -> list[str]:
        """The service's address for each family (allocating missing ones), in that order."""
        mine = self.by_key.setdefault(key, {})
        out = []
        for fam in families:
            if fam not in mine:
                ip = self._free(4 if fam == "IPv4" else 6)
                mine[fam] = ip
                self.used[ip] = key
            out.append(mine[fam])
        return out

    def release(self, key: Key) -> None:
        for ip in self.by_key.pop(key, {}).values():
            self.used.pop(ip, None)

    def keys(self) -> list[Key]:
        return list(self.by_key)
