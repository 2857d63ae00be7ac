"""An in-memory Kubernetes API server over HTTP, for tests and benchmarks.

It speaks enough of the real API for the official `kubernetes` client,
`kubectl get/apply` of plain objects and `mcsdns`: one process-local object
store per instance, one global resourceVersion counter, no auth, plain HTTP
on 127.0.0.1. Run one instance per simulated cluster.

    api = KubeAPI()                       # all groups/versions in RESOURCES served
    api.start()                           # free port (or start(port))
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    api.put({"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
             "metadata": {"name": "db", "namespace": "shop"}, "spec": {...}})   # ADDED / MODIFIED
    api.delete("ServiceImport", "shop", "db")                                     # DELETED
    api.stop(); ...; api.start()          # outage on the same port; objects and RVs kept
    api.start(reset_watch_cache=True)     # ... and old resourceVersions now get 410 Gone

Served API (what is served is configurable):
- discovery: `/version`, `/api`, `/api/v1`, `/apis`, `/apis/G`, `/apis/G/V`
  (APIResourceList with `<plural>` and `<plural>/status`). `KubeAPI(groups={G: (V, ...)})`
  overrides the versions served for a group (first = preferred; `()` = group absent).
  `register(Resource(...))` adds any resource type; defaults are in `RESOURCES`.
- list `GET .../<plural>` (namespaced `/namespaces/NS/<plural>` or all namespaces):
  `labelSelector` (`k`, `!k`, `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`),
  `fieldSelector` (`metadata.name`, `metadata.namespace`; `=`, `==`, `!=`),
  `limit`/`continue` paging over a consistent snapshot (an unknown or evicted token is
  410 Expired), `resourceVersion` (`0`: served as from the watch cache, the whole list in
  one response, `limit` ignored, unless `cache_pages` is set, as newer watch caches page
  their snapshots; otherwise ignored except `resourceVersionMatch=Exact`,
  which only serves the current version). List metadata carries the current
  resourceVersion. Objects are JSON-encoded once per resourceVersion, as the watch cache
  keeps them serialized.
- watch `?watch=1`: HTTP/1.1 chunked, one JSON event per line: ADDED, MODIFIED, DELETED,
  BOOKMARK (only with `allowWatchBookmarks`, every `bookmark_interval` seconds and on
  `bookmark()`), ERROR (`Status` code 410 "Expired" when `resourceVersion` is older than
  the retained event window). `resourceVersion` unset or "0" starts with synthetic ADDED
  events for the current objects. `timeoutSeconds` ends the stream (default 1800 s).
  The window keeps the last `window` events; `compact()` drops them all now.
- writes: POST (create; 409 AlreadyExists), PUT (replace; 409 on a stale
  `metadata.resourceVersion`), PATCH (merge patch; a JSON list body is a JSON patch with
  add/replace/remove), DELETE, and the `/status` subresource (PUT/PATCH change only
  `status`; the main resource ignores `status` changes). uid, creationTimestamp and
  generation (bumped when `spec` changes) are set as the real API does.
- Services get ClusterIPs as kube-apiserver allocates them (`ClusterIPs`: from
  `service_cidrs`, dual-stack per `ipFamilyPolicy`/`ipFamilies`, immutable, headless `None`
  kept, released on delete) and the API's defaults (type, sessionAffinity, port protocol and
  targetPort).
- faults: `stop()`/`start()`, `drop_watches()` (close every open watch),
  `fail_next(n, status, reason, message)` (the next n requests get that error, with a
  `Status` body), `requests` (log of (method, path?query) served).
- RBAC, as far as refusing goes: `deny(plural, verbs)` answers those verbs on that resource
  with kube-apiserver's 403 `Status` (its message naming `user`, verb, resource, group and
  namespace); `allow()` lifts every denial.
- timing: `emitted[rv]` is the `time.perf_counter()` when an event with that
  resourceVersion was first written to a watch stream (for latency benchmarks).
"""

from __future__ import annotations

import base64
import bisect
import copy
import itertools
import json
import socket
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from kube_ipam import ClusterIPs
from kube_select import field_matcher, json_patch, label_matcher, merge_patch
from kube_status import HTTPError, Obj, status


@dataclass(frozen=True)
class Resource:
    """A resource type the test API server serves."""

    plural: str
    kind: str
    group: str  # "" is the core group (/api/v1)
    versions: tuple[str, ...]  # first = preferred
    namespaced: bool = True
    status: bool = True  # has a /status subresource

    @property
    def singular(self) -> str:
        return self.kind.lower()


RESOURCES = (
    Resource("namespaces", "Namespace", "", ("v1",), namespaced=False),
    Resource("services", "Service", "", ("v1",)),
    Resource("endpointslices", "EndpointSlice", "discovery.k8s.io", ("v1",), status=False),
    Resource("serviceexports", "ServiceExport", "multicluster.x-k8s.io", ("v1beta1", "v1alpha1")),
    Resource("serviceimports", "ServiceImport", "multicluster.x-k8s.io", ("v1beta1", "v1alpha1")),
    Resource("clusterproperties", "ClusterProperty", "about.k8s.io", ("v1beta1", "v1alpha1"),
             namespaced=False),
    Resource("leases", "Lease", "coordination.k8s.io", ("v1",), status=False),
)

Key = tuple[str, str, str, str]  # group, plural, namespace ("" if cluster-scoped), name
Event = tuple[int, str, str, str, Obj]  # rv, group, plural, type, object
Route = tuple[Resource, str, str | None, str | None, str | None, str]


# ---- the server ------------------------------------------------------------------------------

class RawJSON(bytes):
    """A response body already encoded."""


class KubeAPI:
    """One simulated cluster's API server (see the module docstring)."""

    def __init__(self, groups: dict[str, tuple[str, ...]] | None = None, window: int = 10000,
                 bookmark_interval: float = 5.0, resources: Iterable[Resource] = RESOURCES,
                 service_cidrs: Iterable[str] = ("10.96.0.0/16",)) -> None:
        self.resources: dict[tuple[str, str], Resource] = {}
        self.served: dict[str, tuple[str, ...]] = {}
        for r in resources:
            self.register(r)
        self.served.update(groups or {})
        self.window = window
        self.bookmark_interval = bookmark_interval
        self.objs: dict[Key, Obj] = {}
        self.events: list[Event] = []
        self.rv = 0
        self.floor = 0  # watching from a resourceVersion below this is 410 Gone
        self.cond = threading.Condition()
        self.requests: list[tuple[str, str]] = []
        self.serving = 0.0  # seconds spent answering requests other than watches (benchmarks)
        self.cache_pages = False  # True: resourceVersion=0 lists are paged too (newer watch caches)
        self.write_latency = 0.0  # seconds each write waits before it is made (an etcd commit; benchmarks)
        self._json: dict[tuple[str, str, str, str], tuple[str, bytes]] = {}  # encoded objects
        self.emitted: dict[int, float] = {}
        self.port = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._conns: set[socket.socket] = set()
        self._watches: set[socket.socket] = set()
        self._epoch = 0  # bumped by drop_watches()/stop() to end watch loops
        self._bookmark_epoch = 0
        self._fail: list[tuple[int, str, str]] = []
        self.user = "system:serviceaccount:mcsdns:mcsdns"  # named in 403 messages
        self._denied: set[tuple[str, str]] = set()  # (plural, verb)
        self._pages: OrderedDict[str, tuple[int, list[Obj]]] = OrderedDict()
        self._page_ids = itertools.count(1)
        self.ipam = ClusterIPs(service_cidrs)

    # ---- configuration ----

    def register(self, r: Resource) -> None:
        """Serve another resource type (and its group/versions)."""
        self.resources[(r.group, r.plural)] = r
        have = self.served.get(r.group, ())
        self.served[r.group] = have + tuple(v for v in r.versions if v not in have)

    def resource_for_kind(self, kind: str, api_version: str | None = None) -> Resource:
        group = api_version.rpartition("/")[0] if api_version else None
        for r in self.resources.values():
            if r.kind == kind and (group is None or r.group == group):
                return r
        raise KeyError(kind)

    # ---- direct state access for tests ----

    def put(self, obj: Obj) -> Obj:
        """Create or replace an object (no resourceVersion check); returns the stored copy."""
        r = self.resource_for_kind(obj["kind"], obj.get("apiVersion"))
        ns = obj["metadata"].get("namespace", "default") if r.namespaced else ""
        with self.cond:
            return self._write(r, ns, copy.deepcopy(obj), replace_status=True)

    def delete(self, kind: str, namespace: str | None, name: str, api_version: str | None = None) -> bool:
        """Delete an object; False if it did not exist."""
        r = self.resource_for_kind(kind, api_version)
        with self.cond:
            cur = self.objs.pop((r.group, r.plural, namespace or "" if r.namespaced else "", name), None)
            if cur is None:
                return False
            if r.kind == "Service":
                self.ipam.release(cur)
            self._emit(r, "DELETED", cur)
            return True

    def get(self, kind: str, namespace: str | None, name: str) -> Obj | None:
        r = self.resource_for_kind(kind)
        with self.cond:
            o = self.objs.get((r.group, r.plural, namespace or "" if r.namespaced else "", name))
            return copy.deepcopy(o) if o else None

    def objects(self, kind: str) -> list[Obj]:
        r = self.resource_for_kind(kind)
        with self.cond:
            return [copy.deepcopy(o) for (g, p, _, _), o in sorted(self.objs.items())
                    if (g, p) == (r.group, r.plural)]

    def compact(self) -> None:
        """Forget every retained event: watches from any older resourceVersion get 410."""
        with self.cond:
            self.events.clear()
            self.floor = self.rv
            self._pages.clear()

    def drop_watches(self) -> None:
        """Close every open watch connection (clients see the stream break)."""
        with self.cond:
            self._epoch += 1
            socks = list(self._watches)
            self.cond.notify_all()
        for s in socks:
            _shutdown(s)

    def bookmark(self) -> None:
        """Send a BOOKMARK now on every watch that allowed them."""
        with self.cond:
            self._bookmark_epoch += 1
            self.cond.notify_all()

    def fail_next(self, n: int, code: int = 500, reason: str = "", message: str = "injected failure") -> None:
        """Answer the next n API requests with HTTP `code` (replaces pending failures; 0 clears)."""
        reason = reason or ("InternalError" if code >= 500 else "Failure")
        with self.cond:
            self._fail = [(code, reason, message)] * n

    def deny(self, plural: str, verbs: Iterable[str] = ("list", "watch")) -> None:
        """Refuse these verbs on this resource (any group, namespace) with 403 Forbidden."""
        with self.cond:
            self._denied.update((plural, v) for v in verbs)

    def allow(self) -> None:
        """Lift every `deny`."""
        with self.cond:
            self._denied.clear()

    def _authorize(self, method: str, r: Resource, ns: str | None, name: str | None, sub: str | None,
                   q: dict[str, str]) -> None:
        """kube-apiserver's 403 for a denied verb (call with self.cond held)."""
        if method == "GET":
            verb = "get" if name else "watch" if q.get("watch") in ("1", "true", "True") else "list"
        else:
            verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[method]
        if (r.plural, verb) not in self._denied:
            return
        what = f"{r.plural}.{r.group}" if r.group else r.plural
        res = f"{r.plural}/{sub}" if sub else r.plural
        scope = f'in the namespace "{ns}"' if ns else "at the cluster scope"
        e = HTTPError(403, "Forbidden", f'{what}{f" {json.dumps(name)}" if name else ""} is forbidden: '
                      f'User "{self.user}" cannot {verb} resource "{res}" in API group "{r.group}" {scope}')
        e.body["details"] = {"group": r.group, "kind": r.plural, **({"name": name} if name else {})}
        raise e

    def _access_review(self, body: Any) -> Obj:
        """A SelfSubjectAccessReview, answered by the rules `_authorize` enforces."""
        spec = (body or {}).get("spec") if isinstance(body, dict) else None
        attrs = (spec or {}).get("resourceAttributes")
        if not isinstance(attrs, dict) or not attrs.get("verb") or not attrs.get("resource"):
            raise HTTPError(422, "Invalid", "spec.resourceAttributes: resource and verb are required")
        with self.cond:
            allowed = (str(attrs["resource"]), str(attrs["verb"])) not in self._denied
        return {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "metadata": {"creationTimestamp": None}, "spec": spec, "status": {"allowed": allowed}}

    # ---- lifecycle ----

    def start(self, port: int | None = None, reset_watch_cache: bool = False) -> None:
        """Listen on 127.0.0.1 (the previous port when restarting)."""
        if reset_watch_cache:
            self.compact()
        handler = type("Handler", (_Handler,), {"api": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port if port is not None else self.port), handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True,
                         name=f"kubeapi-{self.port}").start()

    def stop(self) -> None:
        """Stop listening and close every open connection (an outage)."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        with self.cond:
            self._epoch += 1
            socks = list(self._conns)
            self.cond.notify_all()
        for s in socks:
            _shutdown(s)

    @property
    def running(self) -> bool:
        return self._httpd is not None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def write_kubeconfig(self, path: Path, context: str = "kubeapi", namespace: str | None = None) -> Path:
        """A kubeconfig for this server (no credentials), `context` current."""
        ctx: Obj = {"cluster": context, "user": context}
        if namespace:
            ctx["namespace"] = namespace
        cfg = {"apiVersion": "v1", "kind": "Config", "current-context": context,
               "clusters": [{"name": context, "cluster": {"server": self.url}}],
               "users": [{"name": context, "user": {}}],
               "contexts": [{"name": context, "context": ctx}]}
        path.write_text(json.dumps(cfg, indent=1))
        return path

    def __enter__(self) -> KubeAPI:
        if not self.running:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- internals (call with self.cond held) ----

    def _emit(self, r: Resource, typ: str, obj: Obj) -> None:
        self.rv += 1
        if typ == "DELETED":  # the object may be shared with an earlier event: copy it
            obj = dict(obj, metadata=dict(obj["metadata"]))
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.events.append((self.rv, r.group, r.plural, typ, obj))
        if len(self.events) > self.window:
            drop = len(self.events) - self.window
            self.floor = self.events[drop - 1][0]
            del self.events[:drop]
        self.cond.notify_all()

    def _write(self, r: Resource, ns: str, obj: Obj, replace_status: bool = False,
               status_only: bool = False, expect_rv: str | None = None, create: bool | None = None) -> Obj:
        md = obj.setdefault("metadata", {})
        name = md.get("name")
        if not name:
            raise HTTPError(422, "Invalid", "metadata.name is required")
        key = (r.group, r.plural, ns, name)
        cur = self.objs.get(key)
        if create is True and cur is not None:
            raise HTTPError(409, "AlreadyExists", f'{r.plural} "{name}" already exists')
        if create is False and cur is None:
            raise HTTPError(404, "NotFound", f'{r.plural} "{name}" not found')
        if expect_rv and cur is not None and expect_rv != cur["metadata"]["resourceVersion"]:
            raise HTTPError(409, "Conflict", f'Operation cannot be fulfilled on {r.plural} "{name}": '
                            "the object has been modified; please apply your changes to the latest version")
        if r.namespaced:
            md["namespace"] = ns
        else:
            md.pop("namespace", None)
        obj["kind"] = r.kind
        if "apiVersion" not in obj or obj["apiVersion"].rpartition("/")[0] != r.group:
            obj["apiVersion"] = f"{r.group}/{r.versions[0]}" if r.group else r.versions[0]
        if r.kind == "Service" and not status_only:
            self.ipam.assign(obj, cur, f"{ns}/{name}")
        if cur is None:
            md["uid"] = md.get("uid") or str(uuid.uuid4())
            md["creationTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            md["generation"] = 1
            if r.status and not replace_status:
                obj.pop("status", None)
            typ = "ADDED"
        else:
            old = cur["metadata"]
            if status_only:
                obj = dict(copy.deepcopy(cur), status=obj.get("status"))
                md = obj["metadata"]
            elif r.status and not replace_status:
                obj.pop("status", None)
                if "status" in cur:
                    obj["status"] = copy.deepcopy(cur["status"])
            md["uid"], md["creationTimestamp"] = old["uid"], old["creationTimestamp"]
            md["generation"] = old.get("generation", 1) + (obj.get("spec") != cur.get("spec"))
            typ = "MODIFIED"
        self.objs[key] = obj
        self._emit(r, typ, obj)
        return copy.deepcopy(obj)

    def _served(self, group: str, version: str) -> bool:
        return version in self.served.get(group, ())

    def _resource_list(self, group: str, version: str) -> Obj:
        res = []
        for r in self.resources.values():
            if r.group == group and version in r.versions:
                verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
                res.append({"name": r.plural, "singularName": r.singular, "namespaced": r.namespaced,
                            "kind": r.kind, "verbs": verbs})
                if r.status:
                    res.append({"name": f"{r.plural}/status", "singularName": "", "namespaced": r.namespaced,
                                "kind": r.kind, "verbs": ["get", "patch", "update"]})
        gv = f"{group}/{version}" if group else version
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": res}

    def _group(self, g: str) -> Obj:
        vs = [{"groupVersion": f"{g}/{v}", "version": v} for v in self.served[g]]
        return {"kind": "APIGroup", "apiVersion": "v1", "name": g, "versions": vs,
                "preferredVersion": vs[0]}

    def _discovery(self, parts: list[str]) -> Obj | None:
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
                raise HTTPError(404, "NotFound", "the server could not find the requested resource")
            return self._group(parts[1])
        return None

    def _route(self, parts: list[str]) -> Route | None:
        """(resource, version, namespace, name, subresource, apiVersion) of an object path."""
        if parts and parts[0] == "api" and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts and parts[0] == "apis" and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise HTTPError(404, "NotFound", "the server could not find the requested resource")
        if not self._served(group, version):
            raise HTTPError(404, "NotFound", "the server could not find the requested resource")
        if not rest:
            return None
        ns = None
        if rest[0] == "namespaces" and len(rest) >= 3 and (group, rest[2]) in self.resources:
            ns, rest = rest[1], rest[2:]
        r = self.resources.get((group, rest[0]))
        if r is None or version not in r.versions or len(rest) > 3 or (ns is not None and not r.namespaced):
            raise HTTPError(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub not in (None, "status") or (sub == "status" and not r.status):
            raise HTTPError(404, "NotFound", "the server could not find the requested resource")
        return r, version, ns, name, sub, f"{group}/{version}" if group else version

    def _view(self, obj: Obj, api_version: str) -> Obj:
        return dict(obj, apiVersion=api_version) if obj.get("apiVersion") != api_version else obj

    def handle(self, method: str, url: str, body: Any, content_type: str) -> tuple[int, Any]:  # noqa: C901 - kube-apiserver's verbs, one branch each
        """One non-watch request: (status, JSON body) or (200, ("WATCH", args...))."""
        u = urlparse(url)
        q = {k: v[-1] for k, v in parse_qs(u.query).items()}
        parts = [p for p in u.path.split("/") if p]
        with self.cond:
            self.requests.append((method, url))
            if self._fail:
                raise HTTPError(*self._fail.pop(0))
        if method == "GET":
            d = self._discovery(parts)
            if d is not None:
                return 200, d
        if method == "POST" and parts == ["apis", "authorization.k8s.io", "v1", "selfsubjectaccessreviews"]:
            return 201, self._access_review(body)
        route = self._route(parts)
        if route is None:
            if method != "GET":
                raise HTTPError(405, "MethodNotAllowed")
            return 200, self._resource_list(parts[-2] if parts[0] == "apis" else "", parts[-1])
        r, version, ns, name, sub, api_version = route
        with self.cond:
            self._authorize(method, r, ns, name, sub, q)
        if r.namespaced and ns is None and (name is not None or method != "GET"):
            raise HTTPError(404, "NotFound", "the server could not find the requested resource")
        nskey = ns or "" if r.namespaced else ""
        if method == "GET" and name is None:
            if q.get("watch") in ("1", "true", "True"):
                return 200, ("WATCH", r, api_version, ns, q)
            return 200, self._list(r, api_version, ns, q)
        with self.cond:
            key = (r.group, r.plural, nskey, name or "")
            cur = self.objs.get(key)
            if method == "GET":
                if cur is None:
                    raise HTTPError(404, "NotFound", f'{r.plural} "{name}" not found')
                return 200, self._view(copy.deepcopy(cur), api_version)
            if method == "POST" and name is None:
                if not isinstance(body, dict):
                    raise HTTPError(400, "BadRequest", "body must be an object")
                body.pop("status", None) if r.status else None
                return 201, self._view(self._write(r, nskey, body, create=True), api_version)
            if name is None:
                raise HTTPError(405, "MethodNotAllowed")
            if method == "DELETE":
                if cur is None:
                    raise HTTPError(404, "NotFound", f'{r.plural} "{name}" not found')
                del self.objs[key]
                if r.kind == "Service":
                    self.ipam.release(cur)
                self._emit(r, "DELETED", cur)
                return 200, self._view(copy.deepcopy(cur), api_version)
            if method == "PUT":
                if not isinstance(body, dict) or (body.get("metadata") or {}).get("name") != name:
                    raise HTTPError(400, "BadRequest", "metadata.name must match the URL")
                out = self._write(r, nskey, body, status_only=sub == "status", create=False,
                                  expect_rv=(body.get("metadata") or {}).get("resourceVersion"))
                return 200, self._view(out, api_version)
            if method == "PATCH":
                if cur is None:
                    raise HTTPError(404, "NotFound", f'{r.plural} "{name}" not found')
                new = json_patch(cur, body) if isinstance(body, list) else merge_patch(cur, body)
                meta = (body.get("metadata") or {}) if isinstance(body, dict) else {}
                expect = meta.get("resourceVersion")
                out = self._write(r, nskey, new, status_only=sub == "status", create=False, expect_rv=expect)
                return 200, self._view(out, api_version)
        raise HTTPError(405, "MethodNotAllowed")

    def _list(self, r: Resource, api_version: str, ns: str | None, q: dict[str, str]) -> RawJSON:
        limit = int(q.get("limit") or 0)
        with self.cond:
            cont = q.get("continue")
            if cont:
                try:
                    token, offset_s = base64.urlsafe_b64decode(cont.encode()).decode().split(":")
                    rv, items = self._pages[token]
                    offset = int(offset_s)
                except (ValueError, KeyError) as e:
                    raise HTTPError(410, "Expired", "The provided continue parameter is too old "
                                    "to display a consistent list result.") from e
            else:
                if q.get("resourceVersionMatch") == "Exact" and q.get("resourceVersion") != str(self.rv):
                    raise HTTPError(410, "Expired", f"too old resource version: {q.get('resourceVersion')}")
                if q.get("resourceVersion") == "0" and not self.cache_pages:
                    limit = 0  # served from the watch cache, which ignores limit
                labels = label_matcher(q.get("labelSelector", ""))
                fields = field_matcher(q.get("fieldSelector", ""))
                rv, offset, token = self.rv, 0, ""
                items = [o for (g, p, n, _), o in sorted(self.objs.items())
                         if (g, p) == (r.group, r.plural) and (ns is None or n == ns)
                         and labels(o["metadata"].get("labels") or {}) and fields(o)]
            page = items[offset:offset + limit] if limit else items[offset:]
            meta: Obj = {"resourceVersion": str(rv)}
            if limit and offset + limit < len(items):
                if not token:
                    token = str(next(self._page_ids))
                    self._pages[token] = (rv, items)
                    while len(self._pages) > 64:
                        self._pages.popitem(last=False)
                meta["continue"] = base64.urlsafe_b64encode(f"{token}:{offset + limit}".encode()).decode()
                meta["remainingItemCount"] = len(items) - offset - limit
            out = [self._encoded(o, api_version) for o in page]
        head = json.dumps({"kind": f"{r.kind}List", "apiVersion": api_version, "metadata": meta})
        return RawJSON(head[:-1].encode() + b', "items": [' + b", ".join(out) + b"]}")

    def _encoded(self, obj: Obj, api_version: str) -> bytes:
        """An object as JSON, encoded once per resourceVersion and version (as the watch
        cache of kube-apiserver keeps serialized objects)."""
        md = obj["metadata"]
        key = (obj["kind"], md.get("namespace", ""), md["name"], api_version)
        got = self._json.get(key)
        if got is None or got[0] != md["resourceVersion"]:
            got = self._json[key] = (md["resourceVersion"], json.dumps(self._view(obj, api_version)).encode())
        return got[1]

    def watch(self, send: Callable[[bytes], None], r: Resource, api_version: str, ns: str | None,  # noqa: C901 - to split
              q: dict[str, str]) -> None:
        """Stream events until timeoutSeconds, drop_watches()/stop() or a broken connection."""
        labels = label_matcher(q.get("labelSelector", ""))
        fields = field_matcher(q.get("fieldSelector", ""))
        bookmarks = q.get("allowWatchBookmarks") in ("1", "true", "True")
        deadline = time.monotonic() + float(q.get("timeoutSeconds") or 1800)
        rv_s = q.get("resourceVersion") or "0"

        def line(typ: str, obj: Obj) -> bytes:
            return json.dumps({"type": typ, "object": obj}, separators=(",", ":")).encode() + b"\n"

        def visible(o: Obj) -> bool:
            md = o["metadata"]
            return ((ns is None or md.get("namespace") == ns)
                    and labels(md.get("labels") or {}) and fields(o))

        with self.cond:
            epoch, bm_epoch = self._epoch, self._bookmark_epoch
            if rv_s == "0":
                rv = self.rv
                initial = [line("ADDED", self._view(o, api_version)) for (g, p, _, _), o
                           in sorted(self.objs.items()) if (g, p) == (r.group, r.plural) and visible(o)]
            else:
                try:
                    rv = int(rv_s)
                except ValueError:
                    rv = -1
                initial = []
                if rv < self.floor or rv > self.rv:
                    send(line("ERROR", status(410, "Expired", f"too old resource version: {rv_s} "
                                              f"({self.floor})")))
                    return
        for b in initial:
            send(b)
        next_bm = time.monotonic() + self.bookmark_interval
        while True:
            with self.cond:
                while True:
                    now = time.monotonic()
                    if self._epoch != epoch or now >= deadline:
                        return
                    if rv < self.floor:
                        send(line("ERROR", status(410, "Expired", f"too old resource version: {rv}")))
                        return
                    i = bisect.bisect_right(self.events, rv, key=lambda e: e[0])
                    evs = self.events[i:]
                    want_bm = bookmarks and (now >= next_bm or self._bookmark_epoch != bm_epoch)
                    if evs or want_bm:
                        break
                    self.cond.wait(min(deadline, next_bm if bookmarks else deadline) - now)
                bm_epoch = self._bookmark_epoch
                out = []
                for erv, g, p, typ, obj in evs:
                    rv = erv
                    if (g, p) == (r.group, r.plural) and visible(obj):
                        out.append((erv, line(typ, self._view(obj, api_version))))
                if want_bm:
                    next_bm = now + self.bookmark_interval
                    out.append((0, line("BOOKMARK", {"kind": r.kind, "apiVersion": api_version,
                                                     "metadata": {"resourceVersion": str(self.rv)}})))
                    rv = self.rv
            for erv, b in out:
                send(b)
                if erv:
                    self.emitted.setdefault(erv, time.perf_counter())


def _shutdown(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    api: KubeAPI

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.api.cond:
            self.api._conns.add(self.connection)

    def finish(self) -> None:
        with self.api.cond:
            self.api._conns.discard(self.connection)
            self.api._watches.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def _reply(self, code: int, obj: Any) -> None:
        data = obj if isinstance(obj, RawJSON) else json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _do(self) -> None:
        started = time.perf_counter()
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        if self.command != "GET" and self.api.write_latency:
            time.sleep(self.api.write_latency)
        try:
            body = json.loads(raw) if raw else None
            code, out = self.api.handle(self.command, self.path, body, self.headers.get("Content-Type", ""))
        except HTTPError as e:
            code, out = e.code, e.body
        except (ValueError, KeyError, IndexError, TypeError) as e:
            code, out = 400, status(400, "BadRequest", str(e))
        if isinstance(out, tuple) and out[0] == "WATCH":
            self._watch(*out[1:])
        else:
            self._reply(code, out)
            with self.api.cond:
                self.api.serving += time.perf_counter() - started

    def _watch(self, *args: Any) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        with self.api.cond:
            self.api._watches.add(self.connection)

        def send(b: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(b), b))
            self.wfile.flush()

        try:
            self.api.watch(send, *args)
            send(b"")  # the terminating zero-length chunk
        except OSError:
            self.close_connection = True
        finally:
            with self.api.cond:
                self.api._watches.discard(self.connection)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _do

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass
