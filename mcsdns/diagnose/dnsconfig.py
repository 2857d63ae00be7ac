"""Do pods' DNS servers send the zone to mcsdns? The Corefiles of CoreDNS (ConfigMap
kube-system/coredns) and NodeLocal DNSCache (node-local-dns, when installed) need a server
block for the zone (deploy/coredns/) whose `forward` goes to a Service with ready
endpoints (NodeLocal may go through CoreDNS instead). A missing block is the usual cause
of NXDOMAIN from pods for names the server answers (docs/operations.md)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from ..controller.exports import SERVICE_NAME, labels
from ..kube.keys import Key, key_of
from ..kube.permissions import needed
from .checks import FAIL, OK, WARN, Obj, Result
from .collect import DNS_NAMESPACE, Snapshot

COREDNS, NODELOCAL = "coredns", "node-local-dns"
THROUGH_COREDNS = "__PILLAR__CLUSTER__DNS__"  # NodeLocal's placeholder for its CoreDNS upstream
PLACEHOLDER = "MCSDNS_SERVICE_IP"  # deploy/coredns/'s
_HOST = re.compile(r"^(?:[a-z]+://)?(\[[^]]+\]|[^:/]+)")


def blocks(corefile: str) -> list[tuple[list[str], list[str]]]:
    """The server blocks: (their zones, the lines of their body at depth 1)."""
    out: list[tuple[list[str], list[str]]] = []
    depth = 0
    for raw in corefile.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if depth == 0 and line.endswith("{"):
            out.append((line[:-1].split(), []))
        elif depth == 1 and out:
            out[-1][1].append(line)
        depth = max(0, depth + line.count("{") - line.count("}"))
    return out


def _zone_of(token: str) -> str:
    z = token.split("://", 1)[-1]
    z = z.rsplit(":", 1)[0] if re.search(r":\d+$", z) else z
    return z.rstrip(".").lower() or "."


def forwards(corefile: str, zone: str) -> list[str] | None:
    """The hosts the zone's block forwards to; None when there is no block for the zone."""
    found = None
    for zones, body in blocks(corefile):
        if zone.rstrip(".").lower() not in {_zone_of(z) for z in zones}:
            continue
        found = found or []
        for line in body:
            words = line.rstrip("{").split()
            if words and words[0] == "forward":
                found += [m.group(1).strip("[]") for w in words[2:] if (m := _HOST.match(w))]
    return found


def _service_at(s: Snapshot, ip: str) -> tuple[Key, Obj] | None:
    for k, svc in s.services.items():
        spec = svc.get("spec") or {}
        if ip in (spec.get("clusterIPs") or [spec.get("clusterIP")]):
            return k, svc
    return None


def _ready(s: Snapshot, k: Key) -> int:
    return sum(1 for sl in s.slices if key_of(sl)[0] == k[0] and labels(sl).get(SERVICE_NAME) == k[1]
               for e in sl.get("endpoints") or [] if (e.get("conditions") or {}).get("ready") is not False)


def _target(s: Snapshot, which: str, host: str, via_coredns: bool) -> tuple[str, str]:
    """(status, message) of one forward target."""
    if host == PLACEHOLDER:
        return FAIL, f"forwards to {PLACEHOLDER}: replace it with the mcsdns Service's ClusterIP"
    if host == THROUGH_COREDNS and which == NODELOCAL:
        return (OK, "forwards through CoreDNS") if via_coredns else (FAIL, "forwards through CoreDNS, which "
                                                                          "does not forward the zone")
    found = _service_at(s, host)
    if found is None:
        return FAIL, f"forwards to {host}, which is no Service's ClusterIP here: use the mcsdns Service's"
    k, svc = found
    if which == NODELOCAL and via_coredns and k[0] == DNS_NAMESPACE:
        return OK, f"forwards through CoreDNS ({k[0]}/{k[1]} {host})"
    n = _ready(s, k)
    if not n:
        return FAIL, f"forwards to Service {k[0]}/{k[1]} ({host}), which has no ready endpoint: is mcsdns " \
                     "running?"
    return OK, f"forwards to Service {k[0]}/{k[1]} ({host}, {n} ready endpoint{'s' if n > 1 else ''})"


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
        hosts = forwards(str((cm.get("data") or {}).get("Corefile") or ""), zone)
        if hosts is None:
            snippet = "Corefile" if which == COREDNS else "nodelocaldns"
            yield Result(FAIL, which, s.name, "", f"{where}: no {zone} block, so pods get NXDOMAIN for every "
                         f"{zone} name: add deploy/coredns/{snippet}.snippet")
            continue
        if not hosts:
            yield Result(FAIL, which, s.name, "", f"{where}: the {zone} block has no forward line")
            continue
        if not s.read("services", "endpointslices"):
            continue  # the refused read's own line says so
        found = [_target(s, which, h, via_coredns) for h in hosts]
        good = [m for st, m in found if st == OK]
        if which == COREDNS:
            via_coredns = bool(good)
        status, message = (OK, good[0]) if good else found[0]
        yield Result(status, which, s.name, "", f"{where}: {zone} {message}")
