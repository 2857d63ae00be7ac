"""Do pods' DNS servers send the zone to mcsdns? The Corefiles of CoreDNS (ConfigMap
kube-system/coredns, with the files it imports: its own keys, and AKS's `coredns-custom`
keys as `custom/…`) and NodeLocal DNSCache (node-local-dns, when installed) are read as
CoreDNS reads them (`corefile`), and each region of the zone is followed (`dnsroute`) from
the port pods ask on (CoreDNS: the kube-dns Service's target port; NodeLocal: 53) to the
plugin that answers it. OK when every query reaches mcsdns alone (`dnstarget`: a Service
with ready endpoints, on one of its ports) or a plugin answering the zone itself
(CoreDNS's `multicluster`); FAIL when some would not, as a real CoreDNS shows (tests/
test_coredns_wirings.py). A missing block is the usual cause of NXDOMAIN from pods for
names the server answers (docs/operations.md)."""

from __future__ import annotations

from collections.abc import Iterator
from fnmatch import fnmatchcase

from ..kube.permissions import needed
from .checks import FAIL, OK, WARN, Result
from .collect import DNS_NAMESPACE, Snapshot
from .corefile import Corefile, CorefileError, Lookup, parse
from .dnsroute import Route, probes, route, within
from .dnstarget import COREDNS, NODELOCAL, check, cluster_dns

CUSTOM = "coredns-custom"  # AKS: its keys are CoreDNS's /etc/coredns/custom/ files
MOUNTS = {COREDNS: {"": COREDNS, "custom": CUSTOM}, NODELOCAL: {"": NODELOCAL}}  # dir -> ConfigMap
RANK = {OK: 0, WARN: 1, FAIL: 2}


def _lookup(s: Snapshot, which: str) -> Lookup:
    """Files as CoreDNS's pod sees them: ConfigMap keys under /etc/coredns (the Corefile's
    directory); None for a place no ConfigMap read here holds."""

    def look(pattern: str) -> list[tuple[str, str]] | None:
        path = pattern.removeprefix("/etc/coredns/")
        folder, _, base = path.rpartition("/")
        name = MOUNTS[which].get(folder)
        if path.startswith("/") or name is None or f"configmaps/{name}" in s.optional_unread:
            return None
        data = (s.configmaps.get(name) or {}).get("data") or {}
        return [(f"{folder}/{k}".lstrip("/"), str(v)) for k, v in sorted(data.items())
                if isinstance(k, str) and fnmatchcase(k, base)]
    return look


def _forwarded(s: Snapshot, which: str, r: Route, via_coredns: bool) -> tuple[str, str, str]:
    """(status, message, fix) of a route whose block forwards the name."""
    assert r.forward is not None
    f = r.forward
    found = [check(s, which, u, f.force_tcp, via_coredns) for u in f.upstreams]
    if not found:
        return FAIL, "has a forward line without upstreams", ""
    good = [(m, k) for st, m, _, k in found if st == OK]
    bad = [(m, fix) for st, m, fix, _ in found if st != OK]
    if f.policy == "sequential":
        if found[0][0] != OK:
            return FAIL, f"forwards to {found[0][1]}", found[0][2]
        if bad:
            return WARN, (f"forwards to {found[0][1]}, and when that fails health checks (policy "
                          f"sequential) to {bad[0][0]}"), ""
        return OK, f"forwards to {found[0][1]}", ""
    if not bad and len({k for _, k in good}) == 1:
        return OK, f"forwards to {good[0][0]}", ""
    if not good:
        return FAIL, f"forwards to {bad[0][0]}", bad[0][1]
    other = bad[0][0] if bad else "another Service"
    return FAIL, (f"spreads queries over {len(f.upstreams)} upstreams (policy {f.policy}), so some get "
                  f"wrong answers: to {good[0][0]}, but also to {other}"), "keep only the mcsdns Service"


def _verdict(s: Snapshot, which: str, zone: str, r: Route, via_coredns: bool) -> tuple[str, str]:
    """(status, message) of one route; the message names the name and the block."""
    asked = f"port {r.port}" + (" (the kube-dns Service's target port)" if r.port != 53 else "")
    snippet = "Corefile" if which == COREDNS else "nodelocaldns"
    fix = (f"make the {zone} block's port {r.port}" if r.others else f"add deploy/coredns/{snippet}.snippet")
    elsewhere = f" ({', '.join(map(str, r.others))} listens on another)" if r.others else ""
    if r.key is None:
        return FAIL, f"pods ask on {asked}, where no block serves {r.name}{elsewhere}: {fix}"
    parent = not within(r.key.zone, zone)
    lead = (f"pods ask on {asked}, where no block serves {zone}{elsewhere}: they get block {r.key}, "
            "which " if parent else f"{r.name} ")
    if r.plugin == "multicluster":
        return OK, (f"{r.name} is answered by CoreDNS's multicluster plugin (block {r.key}), from the "
                    "ServiceImports: mcsdns is not on this path")
    if r.plugin == "kubernetes":
        status, message, how = FAIL, f"is answered by the kubernetes plugin of block {r.key}: NXDOMAIN", ""
    elif r.plugin != "forward":
        status, message, how = FAIL, f"has no forward line for it (block {r.key}): SERVFAIL", ""
    else:
        status, message, how = _forwarded(s, which, r, via_coredns)
    if status == OK:
        return OK, f"{r.name} {message}" + (f" (block {r.key})" if parent else "")
    how = fix if parent and status == FAIL else how
    return status, lead + message + (f": {how}" if how else "")


def verdict(s: Snapshot, which: str, corefile: str, zone: str, via_coredns: bool) -> tuple[str, str]:
    """(status, message) of one DNS server's Corefile for `zone`: the worst of its regions."""
    try:
        cf: Corefile = parse(corefile, _lookup(s, which))
    except CorefileError as e:
        return FAIL, f"CoreDNS cannot load this Corefile: {e}"
    port = cluster_dns(s)[1] if which == COREDNS else 53
    zone = zone.rstrip(".").lower()
    found = [_verdict(s, which, zone, r, via_coredns) for n in probes(cf, zone) for r in route(cf, n, port)]
    status, message = max(found, key=lambda f: RANK[f[0]])
    if cf.unread:  # what it would import may change the verdict either way
        status = WARN
        message += f" (not read: {', '.join(f'import {u}' for u in cf.unread)}, which may change this)"
    return status, message


def dns_config_checks(s: Snapshot, zone: str) -> Iterator[Result]:
    """One line each for CoreDNS and (when installed) NodeLocal DNSCache of cluster `s`."""
    via_coredns = False
    for which in (COREDNS, NODELOCAL):
        where = f"ConfigMap {DNS_NAMESPACE}/{which}"
        if f"configmaps/{which}" in s.optional_unread:
            why = s.optional_unread[f"configmaps/{which}"]
            yield Result(WARN, which, s.name, "", f"cannot read {where} ({why}): its {zone} block is not "
                         f"checked (needs {needed('configmaps')} in {DNS_NAMESPACE})")
            continue
        cm = s.configmaps.get(which)
        if cm is None:
            if which == COREDNS:
                yield Result(WARN, which, s.name, "", f"no {where}: make the cluster's DNS server forward "
                             f"{zone} to the mcsdns Service (docs/operations.md)")
            continue
        if not s.read("services", "endpointslices"):
            continue  # the refused read's own line says so
        corefile = str((cm.get("data") or {}).get("Corefile") or "")
        status, message = verdict(s, which, corefile, zone, via_coredns)
        if which == COREDNS:
            via_coredns = status != FAIL
        yield Result(status, which, s.name, "", f"{where}: {message}")

