"""Member clusters: one API client each, the MCS API version it serves, its cluster ID."""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ..data.objects import valid_cluster_id
from ..kube.config import KubeconfigError, client_configuration
from ..kube.errors import VERBS, Request, RequestError
from ..kube.names import ABOUT_GROUP, CLUSTER_PROPERTY_ID, MCS_GROUP, PREFERRED
from ..ops.errors import ConfigError

log = logging.getLogger("mcsdns.controller")

TIMEOUT = (3.0, 10.0)  # connect, read


def resource_of(path: str) -> str:
    """The resource (and subresource) an object path names: `serviceimports/status`."""
    parts = [p for p in path.split("/") if p]
    parts = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if parts[:1] == ["namespaces"] and len(parts) > 2:
        parts = parts[2:]
    return "/".join(parts[:1] + parts[2:3])


class NotFound(Exception):
    """HTTP 404."""


class Conflict(Exception):
    """HTTP 409: the object changed (or exists) since we read it."""


class Unreachable(Exception):
    """The API server could not be reached or answered with a server error."""


@dataclass
class Member:
    """A member cluster, reached through a kubeconfig (and context)."""

    name: str
    kubeconfig: str
    context: str | None = None
    cluster_id: str | None = None
    api: Any = None
    mcs_version: str | None = None
    writes: int = 0
    write_counts: Counter[tuple[str, str]] = field(default_factory=Counter)  # (resource, verb)
    warned: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def parse(cls, spec: str) -> Member:
        """NAME=KUBECONFIG[@CONTEXT]."""
        name, sep, rest = spec.partition("=")
        if not sep or not name or not rest:
            raise ConfigError(f"--cluster {spec}: expected NAME=KUBECONFIG[@CONTEXT]")
        path, _, ctx = rest.partition("@")
        return cls(name=name, kubeconfig=path, context=ctx or None)

    def connect(self, pool: int = 32) -> None:
        """Build the API client from the kubeconfig (no request is made), with up to `pool`
        kept connections (the reconcile workers' writes and the watches share them)."""
        try:
            cfg = client_configuration(self.kubeconfig, self.context)
        except KubeconfigError as e:
            ctx = f"@{self.context}" if self.context else ""
            raise ConfigError(f"--cluster {self.name}={self.kubeconfig}{ctx}: cannot load kubeconfig: "
                              f"{e}") from e
        cfg.connection_pool_maxsize = pool
        self.api = client.ApiClient(cfg)

    # --- raw REST, JSON in and out -------------------------------------------------
    def _call(self, method: str, path: str, query: list[tuple[str, str]], body: Any,
              timeout: tuple[float, float]) -> Any:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        req = self.api.param_serialize(method, path, query_params=query, header_params=headers,
                                       body=body, auth_settings=["BearerToken"])
        return self.api.call_api(*req, _request_timeout=timeout)

    def request(self, method: str, path: str, body: Any = None,
                query: dict[str, str] | None = None) -> Any:
        """One API call; returns the decoded JSON body."""
        write = method in ("POST", "PUT", "PATCH", "DELETE")
        try:
            resp = self._call(method, path, list((query or {}).items()), body, TIMEOUT)
            data = resp.read()
        except ApiException as e:
            raise Unreachable(f"{self.name}: {method} {path}: {e.status} {e.reason}") from e
        except Exception as e:  # urllib3 connection errors, timeouts
            raise Unreachable(f"{self.name}: {method} {path}: {e}") from e
        finally:
            if write:
                with self.lock:
                    self.writes += 1
                    self.write_counts[(resource_of(path), VERBS[method])] += 1
        status = resp.status
        if status == 404:
            raise NotFound(path)
        if status == 409:
            raise Conflict(f"{method} {path}: {resp.reason}")
        if status >= 500 or status == 429:
            raise Unreachable(f"{self.name}: {method} {path}: {status} {resp.reason}")
        if status >= 300:  # a real error (400, 403, 422): the caller logs it (`explain`)
            raise RequestError(status, resp.reason, data, Request.of(path, method=method))
        return json.loads(data) if data else None

    def get(self, path: str, query: dict[str, str] | None = None) -> Any:
        return self.request("GET", path, query=query)

    def items(self, path: str, selector: str | None = None) -> list[dict[str, Any]]:
        """A list call's items (all pages)."""
        out: list[dict[str, Any]] = []
        query: dict[str, str] = {"limit": "500"}
        if selector:
            query["labelSelector"] = selector
        while True:
            data = self.get(path, query)
            out.extend(data.get("items") or [])
            cont = (data.get("metadata") or {}).get("continue")
            if not cont:
                return out
            query["continue"] = cont

    # --- discovery -----------------------------------------------------------------
    def group_version(self, group: str, prefer: tuple[str, ...] = PREFERRED) -> str | None:
        """The preferred served version of an API group, None when not served."""
        try:
            data = self.get(f"/apis/{group}")
        except NotFound:
            return None
        served = [v.get("version") for v in data.get("versions") or []]
        for v in prefer:
            if v in served:
                return v
        return None

    def discover(self) -> None:
        """Find the MCS API version (v1beta1 preferred)."""
        self.mcs_version = self.group_version(MCS_GROUP)
        if self.mcs_version is None and not self.warned:
            self.warned = True
            log.warning("cluster %s does not serve %s (ServiceExport/ServiceImport CRDs missing)",
                        self.name, MCS_GROUP)

    def find_cluster_id(self, version: str) -> tuple[str, str] | None:
        """(ClusterProperty name, value) of the cluster ID property, read with about.k8s.io
        `version`; None when there is none."""
        for prop in CLUSTER_PROPERTY_ID:
            try:
                obj = self.get(f"/apis/{ABOUT_GROUP}/{version}/clusterproperties/{prop}")
            except NotFound:
                continue
            return prop, str((obj.get("spec") or {}).get("value") or "")
        return None

    def read_cluster_id(self) -> str:
        """The cluster ID from the about.k8s.io ClusterProperty."""
        version = self.group_version(ABOUT_GROUP)
        found = self.find_cluster_id(version) if version is not None else None
        if found is None:
            raise ConfigError(f"cluster {self.name}: no ClusterProperty {' or '.join(CLUSTER_PROPERTY_ID)}; "
                              f"create one or pass --cluster-id {self.name}=ID")
        prop, value = found
        if not valid_cluster_id(value):
            raise ConfigError(f"cluster {self.name}: ClusterProperty {prop} value {value!r} "
                              "is not a valid cluster ID (a DNS label or two joined by a dot)")
        return value

    def mcs_path(self, plural: str, namespace: str | None = None, name: str | None = None) -> str:
        base = f"/apis/{MCS_GROUP}/{self.mcs_version}"
        if namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{plural}"
        return f"{base}/{name}" if name else base

    def mcs_api_version(self) -> str:
        return f"{MCS_GROUP}/{self.mcs_version}"
