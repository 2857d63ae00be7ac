"""The test API server's resource types: what it serves, its discovery documents and how a
request path names a resource, as kube-apiserver does."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .status import HTTPError, Obj


@dataclass(frozen=True)
class Resource:
    """A resource type the test API server serves."""

    plural: str
    kind: str
    group: str  # "" is the core group (/api/v1)
    versions: tuple[str, ...]  # first = preferred
    namespaced: bool = True
    status: bool = True  # has a /status subresource
    generation: str = "custom"  # when metadata.generation bumps: "custom" (a CRD's rule),
    # "endpointslice" (any change but metadata's, labels included), "" (never set)
    fields: tuple[str, ...] = ()  # field selectors served beyond metadata.name/namespace

    @property
    def singular(self) -> str:
        return self.kind.lower()

    def api_version(self, version: str) -> str:
        """`group/version`, or `version` alone for the core group."""
        return f"{self.group}/{version}" if self.group else version


RBAC_GROUP = "rbac.authorization.k8s.io"

RESOURCES = (
    Resource("namespaces", "Namespace", "", ("v1",), namespaced=False, generation=""),
    Resource("services", "Service", "", ("v1",), generation="", fields=("spec.clusterIP", "spec.type")),
    Resource("endpointslices", "EndpointSlice", "discovery.k8s.io", ("v1",), status=False,
             generation="endpointslice"),
    Resource("serviceexports", "ServiceExport", "multicluster.x-k8s.io", ("v1beta1", "v1alpha1")),
    Resource("serviceimports", "ServiceImport", "multicluster.x-k8s.io", ("v1beta1", "v1alpha1")),
    Resource("clusterproperties", "ClusterProperty", "about.k8s.io", ("v1beta1", "v1alpha1"),
             namespaced=False),
    Resource("leases", "Lease", "coordination.k8s.io", ("v1",), status=False, generation=""),
    Resource("events", "Event", "", ("v1",), status=False, generation="", fields=("reason",)),
    Resource("serviceaccounts", "ServiceAccount", "", ("v1",), status=False, generation=""),
    Resource("secrets", "Secret", "", ("v1",), status=False, generation=""),
    Resource("configmaps", "ConfigMap", "", ("v1",), status=False, generation=""),
    Resource("pods", "Pod", "", ("v1",), generation=""),
    Resource("clusterroles", "ClusterRole", RBAC_GROUP, ("v1",), namespaced=False, status=False,
             generation=""),
    Resource("clusterrolebindings", "ClusterRoleBinding", RBAC_GROUP, ("v1",), namespaced=False, status=False,
             generation=""),
    Resource("roles", "Role", RBAC_GROUP, ("v1",), status=False, generation=""),
    Resource("rolebindings", "RoleBinding", RBAC_GROUP, ("v1",), status=False, generation=""),
    Resource("nodes", "Node", "", ("v1",), namespaced=False, generation=""),
)
SUBRESOURCES = {"serviceaccounts": "token"}  # besides /status: POST .../serviceaccounts/NAME/token

Route = tuple[Resource, str, str | None, str | None, str | None, str]

_VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]


def not_found() -> HTTPError:
    """kube-apiserver's 404 for a path it does not serve."""
    return HTTPError(404, "NotFound", "the server could not find the requested resource")


def truthy(v: str | None) -> bool:
    """A boolean query parameter's value as the API reads it."""
    return v in ("1", "true", "True")


def is_watch(q: dict[str, str]) -> bool:
    """Whether a GET of a collection asks for a watch."""
    return truthy(q.get("watch"))


class Catalog:
    """The resource types served and the versions served per group (first = preferred)."""

    def __init__(self, resources: Iterable[Resource], groups: dict[str, tuple[str, ...]]) -> None:
        self.resources: dict[tuple[str, str], Resource] = {}
        self.served: dict[str, tuple[str, ...]] = {}
        for r in resources:
            self.register(r)
        self.served.update(groups)

    def register(self, r: Resource) -> None:
        """Serve another resource type (and its group/versions)."""
        self.resources[(r.group, r.plural)] = r
        have = self.served.get(r.group, ())
        self.served[r.group] = have + tuple(v for v in r.versions if v not in have)

    def for_kind(self, kind: str, api_version: str | None = None) -> Resource:
        group = api_version.rpartition("/")[0] if api_version else None
        for r in self.resources.values():
            if r.kind == kind and (group is None or r.group == group):
                return r
        raise KeyError(kind)

    def resource_list(self, group: str, version: str) -> Obj:
        """The APIResourceList of a group/version (`<plural>` and `<plural>/status`)."""
        res = []
        for r in self.resources.values():
            if r.group == group and version in r.versions:
                res.append({"name": r.plural, "singularName": r.singular, "namespaced": r.namespaced,
                            "kind": r.kind, "verbs": list(_VERBS)})
                if r.plural in SUBRESOURCES:
                    res.append({"name": f"{r.plural}/{SUBRESOURCES[r.plural]}", "singularName": "",
                                "namespaced": r.namespaced, "group": "authentication.k8s.io", "version": "v1",
                                "kind": "TokenRequest", "verbs": ["create"]})
                if r.status:
                    res.append({"name": f"{r.plural}/status", "singularName": "", "namespaced": r.namespaced,
                                "kind": r.kind, "verbs": ["get", "patch", "update"]})
        gv = f"{group}/{version}" if group else version
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": res}

    def _group(self, g: str) -> Obj:
        vs = [{"groupVersion": f"{g}/{v}", "version": v} for v in self.served[g]]
        return {"kind": "APIGroup", "apiVersion": "v1", "name": g, "versions": vs,
                "preferredVersion": vs[0]}

    def discovery(self, parts: list[str]) -> Obj | None:
        """The document at `/version`, `/api`, `/apis` or `/apis/G`; None for other paths."""
        if parts == ["version"]:
            return {"major": "1", "minor": "31", "gitVersion": "v1.31.0-kubeapi", "platform": "linux/amd64"}
        if parts == ["api"]:
            return {"kind": "APIVersions", "versions": list(self.served.get("", ())),
                    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}
        if parts == ["apis"]:
            return {"kind": "APIGroupList", "apiVersion": "v1",
                    "groups": [self._group(g) for g, vs in self.served.items() if g and vs]}
        if len(parts) == 2 and parts[0] == "apis":
            if not self.served.get(parts[1]):
                raise not_found()
            return self._group(parts[1])
        return None

    def route(self, parts: list[str]) -> Route | None:
        """(resource, version, namespace, name, subresource, apiVersion) of an object path;
        None for a group/version's own path (its APIResourceList)."""
        if parts and parts[0] == "api" and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts and parts[0] == "apis" and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise not_found()
        if version not in self.served.get(group, ()):
            raise not_found()
        if not rest:
            return None
        ns = None
        if rest[0] == "namespaces" and len(rest) >= 3 and (group, rest[2]) in self.resources:
            ns, rest = rest[1], rest[2:]
        r = self.resources.get((group, rest[0]))
        if r is None or version not in r.versions or len(rest) > 3 or (ns is not None and not r.namespaced):
            raise not_found()
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub not in (None, "status", SUBRESOURCES.get(r.plural)) or (sub == "status" and not r.status):
            raise not_found()
        return r, version, ns, name, sub, r.api_version(version)
