"""The test API server's Service ClusterIP allocation, as kube-apiserver does it."""

from __future__ import annotations

import copy
import ipaddress
from collections.abc import Iterable
from typing import Any

from .status import HTTPError, Obj

FAMILY = {4: "IPv4", 6: "IPv6"}
_IP_FIELDS = ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy")


class ClusterIPs:
    """ClusterIP allocation as kube-apiserver does it: from the service CIDRs (the first is the
    primary family), per `ipFamilyPolicy`/`ipFamilies`; requested addresses must be in range and
    free; `clusterIP`/`clusterIPs` are immutable (an update without them keeps the old ones);
    headless (`None`) and ExternalName Services get none. The first address of a range is
    reserved (the `kubernetes` Service's)."""

    def __init__(self, cidrs: Iterable[str]) -> None:
        self.nets = [ipaddress.ip_network(c) for c in cidrs]
        self.families = [FAMILY[n.version] for n in self.nets]
        self.used: dict[str, str] = {}  # address -> "namespace/name"
        self.cursor: dict[str, int] = {}  # family -> next offset to try

    def _net(self, family: str) -> Any:
        return self.nets[self.families.index(family)]

    def _allocate(self, family: str, owner: str) -> str:
        net = self._net(family)
        size = min(net.num_addresses, 1 << 20)
        start = self.cursor.get(family, 1)
        for i in range(size):
            off = (start + i - 1) % (size - 2) + 1  # skip the network address
            if off == 1 and net.num_addresses > 4:
                continue  # reserved
            ip = str(net[off])
            if ip not in self.used:
                self.used[ip] = owner
                self.cursor[family] = off + 1
                return ip
        raise HTTPError(500, "InternalError", f"range is full: no {family} ClusterIP left")

    def release(self, svc: Obj) -> None:
        for ip in (svc.get("spec") or {}).get("clusterIPs") or []:
            self.used.pop(ip, None)

    def assign(self, svc: Obj, cur: Obj | None, owner: str) -> None:
        """Default and allocate `svc`'s ClusterIPs in place (raises HTTPError 422)."""
        spec = svc.setdefault("spec", {})
        old = (cur or {}).get("spec") or {}
        _defaults(spec)
        if spec["type"] == "ExternalName":
            for f in _IP_FIELDS:
                spec.pop(f, None)
            if cur is not None:
                self.release(cur)
            return
        if old.get("clusterIPs"):  # immutable once set
            for f in _IP_FIELDS:
                spec.setdefault(f, copy.deepcopy(old.get(f)))
            if spec.get("clusterIPs") != old["clusterIPs"] or spec.get("clusterIP") != old["clusterIPs"][0]:
                raise HTTPError(422, "Invalid", f'Service "{owner}" is invalid: spec.clusterIPs[0]: '
                                "Invalid value: field is immutable")
            return
        want = list(spec.get("clusterIPs") or ([spec["clusterIP"]] if spec.get("clusterIP") else []))
        if spec.get("clusterIP") and want and want[0] != spec["clusterIP"]:
            raise HTTPError(422, "Invalid", "spec.clusterIPs[0]: must match spec.clusterIP")
        spec["ipFamilyPolicy"], spec["ipFamilies"] = self._families(spec, want)
        if want == ["None"]:
            spec["clusterIP"], spec["clusterIPs"] = "None", ["None"]
            return
        ips = self._take(spec["ipFamilies"], want, owner)
        spec["clusterIP"], spec["clusterIPs"] = ips[0], ips

    def _families(self, spec: Obj, want: list[str]) -> tuple[str, list[str]]:
        """(ipFamilyPolicy, ipFamilies) of a new Service, checked against this cluster."""
        policy = spec.get("ipFamilyPolicy") or "SingleStack"
        if want == ["None"] and not spec.get("selector") and not spec.get("ipFamilyPolicy"):
            # headless without a selector: both families, whatever the cluster serves
            both = [self.families[0], *(f for f in FAMILY.values() if f != self.families[0])]
            return "RequireDualStack", list(spec.get("ipFamilies") or both)
        if policy not in ("SingleStack", "PreferDualStack", "RequireDualStack"):
            raise HTTPError(422, "Invalid", f"spec.ipFamilyPolicy: Unsupported value: {policy!r}")
        fams = list(spec.get("ipFamilies") or [])
        if not fams and want and want != ["None"]:
            fams = [FAMILY[ipaddress.ip_address(ip).version] for ip in want]
        for f in fams:
            if f not in ("IPv4", "IPv6") or fams.count(f) > 1:
                raise HTTPError(422, "Invalid", f"spec.ipFamilies: Invalid value: {fams}")
        if policy == "SingleStack" and len(fams) > 1:
            raise HTTPError(422, "Invalid", "spec.ipFamilies: may contain one family for SingleStack")
        if policy == "RequireDualStack" and len(self.families) < 2:
            raise HTTPError(422, "Invalid", "spec.ipFamilyPolicy: this cluster is not dual-stack")
        fams = fams or self.families[:1]
        if fams[0] not in self.families or (policy == "RequireDualStack" and fams[1:] and
                                            fams[1] not in self.families):
            raise HTTPError(422, "Invalid", f"spec.ipFamilies: {fams} not configured on this cluster")
        if policy != "SingleStack":
            fams = [f for f in fams if f in self.families]
            fams += [f for f in self.families if f not in fams][:2 - len(fams)]
        return policy, fams[:2]

    def _take(self, families: list[str], want: list[str], owner: str) -> list[str]:
        """One address per family: the requested ones (in range and free) then allocated ones;
        none kept if any fails."""
        ips: list[str] = []
        try:
            for i, fam in enumerate(families):
                ip = self._request(i, fam, want[i], owner) if i < len(want) else self._allocate(fam, owner)
                ips.append(ip)
        except (HTTPError, ValueError) as e:
            for ip in ips:
                self.used.pop(ip, None)
            if isinstance(e, HTTPError):
                raise
            raise HTTPError(422, "Invalid", f"spec.clusterIPs: {e}") from e
        return ips

    def _request(self, i: int, family: str, ip: str, owner: str) -> str:
        """Take a requested address (422 if out of range or in use; ValueError if not an address)."""
        a = ipaddress.ip_address(ip)
        if FAMILY[a.version] != family or a not in self._net(family):
            raise HTTPError(422, "Invalid", f"spec.clusterIPs[{i}]: Invalid value: {ip!r}: "
                            "provided IP is not in the valid range")
        if ip in self.used:
            raise HTTPError(422, "Invalid", f"spec.clusterIPs[{i}]: Invalid value: {ip!r}: "
                            "provided IP is already allocated")
        self.used[ip] = owner
        return ip


def _defaults(spec: Obj) -> None:
    """The API's defaults for a Service: type, sessionAffinity, port protocol and targetPort."""
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec["type"] != "ExternalName":
        spec.setdefault("internalTrafficPolicy", "Cluster")
    for p in spec.get("ports") or []:
        if isinstance(p, dict):
            p.setdefault("protocol", "TCP")
            if spec["type"] != "ExternalName":
                p.setdefault("targetPort", p.get("port"))
