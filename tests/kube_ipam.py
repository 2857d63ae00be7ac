"""The test API server's Service ClusterIP allocation, as kube-apiserver does it."""

from __future__ import annotations

import copy
import ipaddress
from collections.abc import Iterable
from typing import Any

from kube_status import HTTPError, Obj

FAMILY = {4: "IPv4", 6: "IPv6"}


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

    def assign(self, svc: Obj, cur: Obj | None, owner: str) -> None:  # noqa: C901 - kube-apiserver's ClusterIP rules, one branch each
        """Default and allocate `svc`'s ClusterIPs in place (raises HTTPError 422)."""
        spec = svc.setdefault("spec", {})
        old = (cur or {}).get("spec") or {}
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        for p in spec.get("ports") or []:
            if isinstance(p, dict):
                p.setdefault("protocol", "TCP")
                if spec["type"] != "ExternalName":
                    p.setdefault("targetPort", p.get("port"))
        if spec["type"] == "ExternalName":
            for f in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
                spec.pop(f, None)
            if cur is not None:
                self.release(cur)
            return
        if old.get("clusterIPs"):  # immutable once set
            for f in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
                spec.setdefault(f, copy.deepcopy(old.get(f)))
            if spec.get("clusterIPs") != old["clusterIPs"] or spec.get("clusterIP") != old["clusterIPs"][0]:
                raise HTTPError(422, "Invalid", f'Service "{owner}" is invalid: spec.clusterIPs[0]: '
                                "Invalid value: field is immutable")
            return
        want = list(spec.get("clusterIPs") or ([spec["clusterIP"]] if spec.get("clusterIP") else []))
        if spec.get("clusterIP") and want and want[0] != spec["clusterIP"]:
            raise HTTPError(422, "Invalid", "spec.clusterIPs[0]: must match spec.clusterIP")
        policy = spec.get("ipFamilyPolicy") or "SingleStack"
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
        spec["ipFamilyPolicy"], spec["ipFamilies"] = policy, fams[:2]
        if want == ["None"]:
            spec["clusterIP"], spec["clusterIPs"] = "None", ["None"]
            return
        ips = []
        try:
            for i, fam in enumerate(spec["ipFamilies"]):
                if i < len(want):
                    ip = want[i]
                    a = ipaddress.ip_address(ip)
                    if FAMILY[a.version] != fam or a not in self._net(fam):
                        raise HTTPError(422, "Invalid", f"spec.clusterIPs[{i}]: Invalid value: {ip!r}: "
                                        "provided IP is not in the valid range")
                    if ip in self.used:
                        raise HTTPError(422, "Invalid", f"spec.clusterIPs[{i}]: Invalid value: {ip!r}: "
                                        "provided IP is already allocated")
                    self.used[ip] = owner
                else:
                    ip = self._allocate(fam, owner)
                ips.append(ip)
        except (HTTPError, ValueError) as e:
            for ip in ips:
                self.used.pop(ip, None)
            if isinstance(e, HTTPError):
                raise
            raise HTTPError(422, "Invalid", f"spec.clusterIPs: {e}") from e
        spec["clusterIP"], spec["clusterIPs"] = ips[0], ips
