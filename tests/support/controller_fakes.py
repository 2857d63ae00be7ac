"""An in-memory member for unit tests of `Reconciler`: `FakeMember` answers the requests
the writes make (create, replace, status, delete, with resourceVersions, 404 and 409), and
`FakeView` is the informer cache that a reconcile reads, kept apart from the API's own
store so that a test sees whether each write's result went back into it."""

from __future__ import annotations

import copy
import itertools
from typing import Any

from mcsdns.controller.exports import is_ours
from mcsdns.controller.informers import service_index, slice_index
from mcsdns.controller.locality import NodeZones
from mcsdns.kube.apiclient.errors import Conflict, NotFound, Unreachable
from mcsdns.kube.apiclient.keys import Key, key_of

Obj = dict[str, Any]
MCS = "multicluster.x-k8s.io/v1beta1"
_rv = itertools.count(1)
_ip = itertools.count(1)


class FakeMember:
    """One member's API: objects by (resource, namespace, name), and the writes made."""

    def __init__(self, name: str, cluster_id: str) -> None:
        self.name = name
        self.cluster_id: str | None = cluster_id
        self.mcs_version: str | None = "v1beta1"
        self.store: dict[tuple[str, str, str], Obj] = {}
        self.writes: list[tuple[str, str, str]] = []  # (method, resource, name)
        self.failing: set[str] = set()  # resources whose writes fail (member unreachable)

    def mcs_api_version(self) -> str:
        return MCS

    def mcs_path(self, plural: str, namespace: str | None = None, name: str | None = None) -> str:
        base = f"/apis/{MCS}" + (f"/namespaces/{namespace}" if namespace else "") + f"/{plural}"
        return f"{base}/{name}" if name else base

    def request(self, method: str, path: str, body: Any = None,
                query: dict[str, str] | None = None) -> Any:
        parts = path.strip("/").split("/")
        status = parts[-1] == "status"
        if status:
            parts = parts[:-1]
        i = parts.index("namespaces")
        ns, rest = parts[i + 1], parts[i + 2:]
        resource, name = rest[0], rest[1] if len(rest) > 1 else str(body["metadata"]["name"])
        if resource in self.failing:
            raise Unreachable(f"{self.name}: {method} {path}: connection refused")
        self.writes.append((method + (" status" if status else ""), resource, name))
        k = (resource, ns, name)
        have = self.store.get(k)
        if method == "DELETE":
            if have is None:
                raise NotFound(path)
            del self.store[k]
            return {}
        obj = copy.deepcopy(body)
        md = obj.setdefault("metadata", {})
        md["namespace"] = ns
        if method == "POST":
            if have is not None:
                raise Conflict(f"{resource} {ns}/{name} already exists")
            md["uid"] = f"uid-{next(_rv)}"
            if resource == "services" and obj.get("spec", {}).get("clusterIP") != "None":
                ip = f"10.96.0.{next(_ip)}"
                obj["spec"]["clusterIP"], obj["spec"]["clusterIPs"] = ip, [ip]
        else:  # PUT
            if have is None:
                raise NotFound(path)
            if md.get("resourceVersion") != have["metadata"]["resourceVersion"]:
                raise Conflict(f"{resource} {ns}/{name}: resourceVersion changed")
            md["uid"] = have["metadata"]["uid"]
            if status:
                obj = {**copy.deepcopy(have), "status": obj.get("status")}
            elif "status" in have:
                obj["status"] = copy.deepcopy(have["status"])
        obj["metadata"]["resourceVersion"] = str(next(_rv))
        self.store[k] = obj
        return copy.deepcopy(obj)

    def get(self, resource: str, ns: str, name: str) -> Obj | None:
        return self.store.get((resource, ns, name))

    def objects(self, resource: str) -> list[Obj]:
        return [o for (r, _, _), o in sorted(self.store.items()) if r == resource]


class FakeView:
    """The informer caches of one member as plain dicts: kind -> key -> object."""

    KINDS = ("namespaces", "serviceexports", "services", "endpointslices", "serviceimports")

    def __init__(self, member: FakeMember) -> None:
        self._member = member
        self.reachable = True
        self.last_ok: float | None = 0.0
        self.caches: dict[str, dict[Key, Obj]] = {k: {} for k in self.KINDS}
        self.node_zones: NodeZones | None = None  # the member's Nodes' zones (None: not listed)

    @property
    def member(self) -> FakeMember:
        return self._member

    @property
    def synced(self) -> bool:
        return True

    # --- fixtures: an object in the API and, as a watch would bring it, in the cache --
    def seed(self, kind: str, obj: Obj) -> Obj:
        md = obj["metadata"]
        ns = md.get("namespace", "")
        out = copy.deepcopy(obj)
        out["metadata"].update(resourceVersion=str(next(_rv)), uid=f"uid-{next(_rv)}",
                               creationTimestamp="2026-01-01T00:00:00Z")
        self._member.store[(kind, ns, md["name"])] = out
        self.caches[kind][key_of(out)] = copy.deepcopy(out)
        return out

    def refresh(self) -> None:
        """The cache catches up with the API (every watch event delivered)."""
        for kind in self.KINDS:
            self.caches[kind] = {key_of(o): copy.deepcopy(o) for o in self._member.objects(kind)}

    # --- MemberView -------------------------------------------------------------------
    def has_namespace(self, ns: str) -> bool:
        return ("", ns) in self.caches["namespaces"]

    def export(self, k: Key) -> Obj | None:
        return self.caches["serviceexports"].get(k)

    def service(self, k: Key) -> Obj | None:
        return self.caches["services"].get(k)

    def service_import(self, k: Key) -> Obj | None:
        return self.caches["serviceimports"].get(k)

    def source_slices(self, k: Key) -> list[Obj]:
        return sorted((s for s in self.caches["endpointslices"].values() if slice_index(s) == ("src", *k)),
                      key=lambda s: str(s["metadata"]["name"]))

    def our_slices(self, k: Key) -> list[Obj]:
        return [s for s in self.caches["endpointslices"].values() if slice_index(s) == ("ours", *k)]

    def our_services(self, k: Key) -> list[Obj]:
        return [s for s in self.caches["services"].values() if service_index(s) == ("ours", *k)]

    def imports(self) -> list[tuple[Key, Obj]]:
        return list(self.caches["serviceimports"].items())

    def keys(self) -> set[Key]:
        out = set(self.caches["serviceexports"])
        out |= {k for k, si in self.caches["serviceimports"].items() if is_ours(si)}
        for kind in ("endpointslices", "services"):
            for o in self.caches[kind].values():
                iv = slice_index(o) if kind == "endpointslices" else service_index(o)
                if isinstance(iv, tuple) and iv[0] == "ours":
                    out.add((iv[1], iv[2]))
        return out

    def zones(self) -> NodeZones | None:
        return self.node_zones

    def note_written(self, kind: str, obj: Obj | None, k: Key | None = None) -> None:
        if obj is None:
            if k is not None:
                self.caches[kind].pop(k, None)
            return
        self.caches[kind][key_of(obj)] = copy.deepcopy(obj)


def member(name: str, cluster_id: str, namespaces: tuple[str, ...] = ("shop",)) -> FakeView:
    """A member with the given namespaces."""
    v = FakeView(FakeMember(name, cluster_id))
    for ns in namespaces:
        v.seed("namespaces", {"metadata": {"name": ns}})
    return v


def export_service(v: FakeView, ns: str, name: str, addrs: tuple[str, ...] = ("10.1.0.5",),
                   headless: bool = False, port: int = 80) -> None:
    """A Service with one ready EndpointSlice, and its ServiceExport."""
    spec: Obj = {"type": "ClusterIP", "ports": [{"name": "http", "port": port, "protocol": "TCP"}]}
    if headless:
        spec["clusterIP"] = "None"
    v.seed("services", {"metadata": {"name": name, "namespace": ns}, "spec": spec})
    v.seed("endpointslices", {
        "metadata": {"name": f"{name}-abc", "namespace": ns, "labels": {"kubernetes.io/service-name": name}},
        "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": [a], "conditions": {"ready": True}} for a in addrs]})
    v.seed("serviceexports", {"apiVersion": MCS, "kind": "ServiceExport",
                              "metadata": {"name": name, "namespace": ns}})
