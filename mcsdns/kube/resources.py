"""The API resources mcsdns reads and writes, each defined once: group, plural, kind,
whether namespaced, version (None where the served one is discovered: the MCS and
about.k8s.io groups), and `path`, the one URL builder."""

from __future__ import annotations

from dataclasses import dataclass

from .names import ABOUT_GROUP, MCS_GROUP


@dataclass(frozen=True)
class Resource:
    """One API resource."""

    group: str  # "" is the core group
    plural: str
    kind: str
    namespaced: bool = True
    version: str | None = None  # None: discovered, passed to `path`

    def api_version(self, version: str | None = None) -> str:
        """`apiVersion` of its objects: `group/version`, or `version` in the core group."""
        v = self._version(version)
        return f"{self.group}/{v}" if self.group else v

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None,
             *, version: str | None = None) -> str:
        """The collection's path (in `namespace`, or across all), an object's (`name`) or its
        subresource's: `/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices/web-x`."""
        v = self._version(version)
        out = f"/apis/{self.group}/{v}" if self.group else f"/api/{v}"
        if namespace and self.namespaced:
            out += f"/namespaces/{namespace}"
        out += f"/{self.plural}"
        if name:
            out += f"/{name}" + (f"/{subresource}" if subresource else "")
        return out

    def _version(self, version: str | None) -> str:
        v = version or self.version
        if not v:
            raise ValueError(f"{self.plural}.{self.group}: no version (not discovered yet?)")
        return v


NAMESPACES = Resource("", "namespaces", "Namespace", namespaced=False, version="v1")
SERVICES = Resource("", "services", "Service", version="v1")
ENDPOINT_SLICES = Resource("discovery.k8s.io", "endpointslices", "EndpointSlice", version="v1")
SERVICE_EXPORTS = Resource(MCS_GROUP, "serviceexports", "ServiceExport")
SERVICE_IMPORTS = Resource(MCS_GROUP, "serviceimports", "ServiceImport")
CLUSTER_PROPERTIES = Resource(ABOUT_GROUP, "clusterproperties", "ClusterProperty", namespaced=False)
NODES = Resource("", "nodes", "Node", namespaced=False, version="v1")
LEASES = Resource("coordination.k8s.io", "leases", "Lease", version="v1")
EVENTS = Resource("", "events", "Event", version="v1")  # core v1: count and lastTimestamp
SERVICE_ACCOUNTS = Resource("", "serviceaccounts", "ServiceAccount", version="v1")  # + /token: TokenRequest
TOKEN_REQUESTS = Resource("authentication.k8s.io", "tokenrequests", "TokenRequest", version="v1")
SECRETS = Resource("", "secrets", "Secret", version="v1")
CONFIG_MAPS = Resource("", "configmaps", "ConfigMap", version="v1")
PODS = Resource("", "pods", "Pod", version="v1")
CLUSTER_ROLES = Resource("rbac.authorization.k8s.io", "clusterroles", "ClusterRole", namespaced=False,
                         version="v1")
CLUSTER_ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "clusterrolebindings", "ClusterRoleBinding",
                                 namespaced=False, version="v1")
ROLES = Resource("rbac.authorization.k8s.io", "roles", "Role", version="v1")
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "rolebindings", "RoleBinding", version="v1")
ACCESS_REVIEWS = Resource("authorization.k8s.io", "selfsubjectaccessreviews", "SelfSubjectAccessReview",
                          namespaced=False, version="v1")
SUBJECT_ACCESS_REVIEWS = Resource("authorization.k8s.io", "subjectaccessreviews", "SubjectAccessReview",
                                  namespaced=False, version="v1")
MCS = {r.plural: r for r in (SERVICE_EXPORTS, SERVICE_IMPORTS)}  # the discovered-version MCS kinds
