"""Where a CoreDNS `forward` upstream leads in a cluster: a Service by its ClusterIP, the
port and protocol it is asked on among the Service's ports, its ready endpoints; and the
port pods' queries reach CoreDNS on (the kube-dns Service's target port)."""

from __future__ import annotations

from typing import Any

from ..controller.exports import SERVICE_NAME, labels
from ..kube.apiclient.keys import Key, key_of
from .checks import FAIL, OK
from .collect import DNS_NAMESPACE, Snapshot
from .dnsroute import Upstream

Obj = dict[str, Any]
COREDNS, NODELOCAL = "coredns", "node-local-dns"
THROUGH_COREDNS = "__PILLAR__CLUSTER__DNS__"  # NodeLocal's placeholder for its CoreDNS upstream
PLACEHOLDER = "MCSDNS_SERVICE_IP"  # deploy/coredns/'s
CLUSTER_DNS = (DNS_NAMESPACE, "kube-dns")  # the Service pods' resolv.conf names (CoreDNS keeps the name)


def _ports(svc: Obj) -> list[Obj]:
    ports = (svc.get("spec") or {}).get("ports")
    return [p for p in ports if isinstance(p, dict)] if isinstance(ports, list) else []


def service_at(s: Snapshot, ip: str) -> tuple[Key, Obj] | None:
    for k, svc in s.services.items():
        spec = svc.get("spec") or {}
        if ip in (spec.get("clusterIPs") or [spec.get("clusterIP")]):
            return k, svc
    return None


def _slices(s: Snapshot, k: Key) -> list[Obj]:
    return [sl for sl in s.slices if key_of(sl)[0] == k[0] and labels(sl).get(SERVICE_NAME) == k[1]]


def ready(s: Snapshot, k: Key) -> int:
    return sum(1 for sl in _slices(s, k) for e in sl.get("endpoints") or []
               if isinstance(e, dict) and (e.get("conditions") or {}).get("ready") is not False)


def cluster_dns(s: Snapshot) -> tuple[Key | None, int]:
    """The cluster DNS Service (kube-system/kube-dns, or the one labelled k8s-app=kube-dns)
    and the port its port 53/UDP sends to: CoreDNS's port for pods' queries (53 when unknown)."""
    k: Key | None = CLUSTER_DNS if CLUSTER_DNS in s.services else next(
        (k for k, v in s.services.items()
         if k[0] == DNS_NAMESPACE and labels(v).get("k8s-app") == "kube-dns"), None)
    if k is None:
        return None, 53
    for p in _ports(s.services[k]):
        if p.get("port") == 53 and p.get("protocol", "UDP") == "UDP":
            target = p.get("targetPort", 53)
            if isinstance(target, int) and 0 < target < 65536:
                return k, target
            for sl in _slices(s, k):  # a named target port: the number is in the slices
                for sp in sl.get("ports") or []:
                    if isinstance(sp, dict) and sp.get("name") == target and isinstance(sp.get("port"), int):
                        return k, int(sp["port"])
    return k, 53


Verdict = tuple[str, str, str, "Key | None"]  # status, where it leads, how to fix it, the Service


def check(s: Snapshot, which: str, u: Upstream, tcp: bool, via_coredns: bool) -> Verdict:
    """Where one upstream leads ("forwards to" it), whether that is mcsdns, and the fix."""
    if u.host == PLACEHOLDER:
        return FAIL, PLACEHOLDER, "replace it with the mcsdns Service's ClusterIP", None
    if not u.port:
        return FAIL, f"{u.host}: the node's resolvers, which answer NXDOMAIN for the zone", "", None
    if u.host == THROUGH_COREDNS and which == NODELOCAL:
        return ((OK, "CoreDNS", "", CLUSTER_DNS) if via_coredns else
                (FAIL, "CoreDNS, which does not forward the zone", "", CLUSTER_DNS))
    if u.scheme != "dns":
        return FAIL, f"{u} over {u.scheme}, which mcsdns does not serve", "", None
    found = service_at(s, u.host)
    if found is None:
        return FAIL, f"{u.host}, which is no Service's ClusterIP here", "use the mcsdns Service's", None
    k, svc = found
    name = f"Service {k[0]}/{k[1]}"
    if k == cluster_dns(s)[0]:
        if which == COREDNS:
            return FAIL, f"{u} ({name}: the cluster DNS itself, a loop)", "", k
        return ((OK, f"CoreDNS ({name} {u.host})", "", k) if via_coredns else
                (FAIL, f"CoreDNS ({name}), which does not forward the zone", "", k))
    proto = "TCP" if tcp else "UDP"
    ports = [(p.get("port"), p.get("protocol", "TCP")) for p in _ports(svc)]
    if (u.port, proto) not in ports:
        have = ", ".join(f"{p}/{pr}" for p, pr in ports) or "none"
        return FAIL, f"{u}, a port {name} does not have for {proto} (its ports: {have})", "", k
    n = ready(s, k)
    if not n:
        return FAIL, f"{name} ({u}), which has no ready endpoint", "is mcsdns running?", k
    return OK, f"{name} ({u}, {n} ready endpoint{'s' if n > 1 else ''})", "", k
