"""`KubeAPI`: the fake API server the package docstring describes, composed of its parts."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterable, Mapping
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qs, urlparse

from .fields import manager_of
from .http import Connections, Handler
from .ipam import ClusterIPs
from .lists import Lists
from .rbac import RBAC
from .resources import RESOURCES, Catalog, Resource, Route, is_watch, not_found
from .select import json_patch, merge_patch
from .status import HTTPError, Obj
from .store import Store, view
from .tokens import Tokens
from .valid import accepts, check_fields, check_patch, check_watch, validate
from .watch import Send, Watches

__all__ = ["RESOURCES", "KubeAPI", "Resource"]


class KubeAPI:
    """One simulated cluster's API server (see the module docstring)."""

    def __init__(self, groups: dict[str, tuple[str, ...]] | None = None, window: int = 10000,
                 bookmark_interval: float = 5.0, resources: Iterable[Resource] = RESOURCES,
                 service_cidrs: Iterable[str] = ("10.96.0.0/16",)) -> None:
        self.catalog = Catalog(resources, groups or {})
        self.resources = self.catalog.resources
        self.served = self.catalog.served
        self.store = Store(window, service_cidrs)
        self.cond = self.store.cond
        self.lists = Lists(self.store)
        self.watches = Watches(self.store, bookmark_interval)
        self.emitted = self.watches.emitted  # rv -> perf_counter() when first streamed
        self.rbac = RBAC(self._stored)
        self.tokens = Tokens()
        self.connections = Connections(self.cond)
        self.requests: list[tuple[str, str]] = []
        self.serving = 0.0  # seconds spent answering requests other than watches (benchmarks)
        self.cache_pages = False  # True: resourceVersion=0 lists are paged too (newer watch caches)
        self.write_latency = 0.0  # seconds each write waits before it is made (an etcd commit; benchmarks)
        self.admin_tokens: set[str] | None = None  # when set: only these (or issued) tokens, else 401
        self.slow_gets: dict[str, float] = {}  # path prefix -> seconds a GET of it waits (a slow list)
        self.port = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._fail: list[tuple[int, str, str]] = []

    # ---- configuration ----

    def register(self, r: Resource) -> None:
        """Serve another resource type (and its group/versions)."""
        self.catalog.register(r)

    def resource_for_kind(self, kind: str, api_version: str | None = None) -> Resource:
        return self.catalog.for_kind(kind, api_version)

    @property
    def ipam(self) -> ClusterIPs:
        return self.store.ipam

    @property
    def rv(self) -> int:
        """The current resourceVersion."""
        return self.store.rv

    @property
    def bookmark_interval(self) -> float:
        return self.watches.bookmark_interval

    @bookmark_interval.setter
    def bookmark_interval(self, seconds: float) -> None:
        self.watches.bookmark_interval = seconds

    @property
    def watch_list(self) -> bool:
        """Whether streaming lists (`sendInitialEvents`) are served; False (the default) refuses
        them as kube-apiserver does on an etcd without progress notifications (etcd 3.4)."""
        return self.watches.watch_list

    @watch_list.setter
    def watch_list(self, on: bool) -> None:
        self.watches.watch_list = on

    @property
    def user(self) -> str:
        """The user named in 403 messages."""
        return self.rbac.user

    @user.setter
    def user(self, user: str) -> None:
        self.rbac.user = user

    # ---- direct state access for tests ----

    def put(self, obj: Obj) -> Obj:
        """Create or replace an object (no resourceVersion check); returns the stored copy."""
        r = self.resource_for_kind(obj["kind"], obj.get("apiVersion"))
        ns = obj["metadata"].get("namespace", "default") if r.namespaced else ""
        with self.cond:
            return self.store.write(r, ns, copy.deepcopy(obj), replace_status=True, manager="kubeapi")

    def delete(self, kind: str, namespace: str | None, name: str, api_version: str | None = None) -> bool:
        """Delete an object; False if it did not exist."""
        r = self.resource_for_kind(kind, api_version)
        with self.cond:
            return self.store.remove(r, self.store.key(r, namespace, name)) is not None

    def get(self, kind: str, namespace: str | None, name: str) -> Obj | None:
        r = self.resource_for_kind(kind)
        with self.cond:
            o = self.store.objs.get(self.store.key(r, namespace, name))
            return copy.deepcopy(o) if o else None

    def _stored(self, kind: str) -> list[Obj]:
        """The stored objects of `kind`, not copied (call with `cond` held)."""
        return self.store.matching(self.resource_for_kind(kind), lambda _ns, _o: True)

    def objects(self, kind: str) -> list[Obj]:
        r = self.resource_for_kind(kind)
        with self.cond:
            return [copy.deepcopy(o) for o in self.store.matching(r, lambda _ns, _o: True)]

    # ---- faults ----

    def compact(self) -> None:
        """Forget every retained event: watches from any older resourceVersion get 410."""
        with self.cond:
            self.store.compact()
            self.lists.forget()

    def drop_watches(self) -> None:
        """Close every open watch connection (clients see the stream break)."""
        with self.cond:
            self.watches.end_all()
        self.connections.close(watches_only=True)

    def bookmark(self) -> None:
        """Send a BOOKMARK now on every watch that allowed them."""
        with self.cond:
            self.watches.bookmark()

    def fail_next(self, n: int, code: int = 500, reason: str = "", message: str = "injected failure") -> None:
        """Answer the next n API requests with HTTP `code` (replaces pending failures; 0 clears)."""
        reason = reason or ("InternalError" if code >= 500 else "Failure")
        with self.cond:
            self._fail = [(code, reason, message)] * n

    def deny(self, plural: str, verbs: Iterable[str] = ("list", "watch")) -> None:
        """Refuse these verbs on this resource (any group, namespace) with 403 Forbidden."""
        with self.cond:
            self.rbac.deny(plural, verbs)

    def allow(self) -> None:
        """Lift every `deny`."""
        with self.cond:
            self.rbac.allow()

    # ---- lifecycle ----

    def start(self, port: int | None = None, reset_watch_cache: bool = False) -> None:
        """Listen on 127.0.0.1 (the previous port when restarting)."""
        if reset_watch_cache:
            self.compact()
        handler = type("Handler", (Handler,), {"api": self})
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
            self.watches.end_all()
        self.connections.close(watches_only=False)

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

    def __enter__(self) -> Self:
        if not self.running:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- requests ----

    def handle(self, method: str, url: str, body: Any,
               headers: Mapping[str, str] | None = None) -> tuple[int, Any]:
        """One non-watch request: (status, JSON body) or (200, ("WATCH", args...))."""
        headers = headers or {}
        u = urlparse(url)
        q = {k: v[-1] for k, v in parse_qs(u.query).items()}
        parts = [p for p in u.path.split("/") if p]
        auth = headers.get("Authorization") or headers.get("authorization") or ""
        with self.cond:
            self.requests.append((method, url))
            token = _bearer(headers)
            known = self.admin_tokens is None or token in self.admin_tokens or token in self.tokens.issued
            if not known:
                raise HTTPError(401, "Unauthorized")  # kube-apiserver's answer to unknown credentials
            if self._fail:
                raise HTTPError(*self._fail.pop(0))
            user = self.rbac.authenticate(auth.removeprefix("Bearer ").strip(), self.tokens.issued)
        if method == "GET" and parts == ["readyz"]:
            return 200, "ok"  # kube-apiserver's readiness (text there, a JSON string here)
        if method == "GET":
            d = self.catalog.discovery(parts)
            if d is not None:
                return 200, d
        if method == "POST" and parts == ["apis", "authorization.k8s.io", "v1", "selfsubjectaccessreviews"]:
            with self.cond:
                return 201, self.rbac.review(body, user)
        if method == "POST" and parts == ["apis", "authorization.k8s.io", "v1", "subjectaccessreviews"]:
            with self.cond:
                return 201, self.rbac.review_for(body, user)
        route = self.catalog.route(parts)
        if route is None:
            if method != "GET":
                raise HTTPError(405, "MethodNotAllowed")
            return 200, self.catalog.resource_list(parts[-2] if parts[0] == "apis" else "", parts[-1])
        if method == "PATCH":
            check_patch(route[0], headers.get("Content-Type") or "")
        as_meta = accepts(headers.get("Accept") or "")
        manager = manager_of(headers.get("User-Agent") or "", q.get("fieldManager"))
        return self._handle_resource(method, route, body, q, (manager, as_meta), user)

    def _handle_resource(self, method: str, route: Route, body: Any, q: dict[str, str],
                         how: tuple[str, str | None], user: str | None = None) -> tuple[int, Any]:
        """A request on a collection or one object, by `user` (None: the admin); `how`:
        (field manager, the `as` asked for)."""
        r, _version, ns, name, sub, api_version = route
        with self.cond:
            self.rbac.authorize(method, r, ns, name, sub, q, user)
        check_fields(r, body, q)
        if r.namespaced and ns is None and (name is not None or method != "GET"):
            raise not_found()
        if sub == "token":
            if method != "POST":
                raise HTTPError(405, "MethodNotAllowed")
            with self.cond:
                sa = self.store.objs.get((r.group, r.plural, ns or "", name or ""))
                return 201, self.tokens.request(sa, ns or "", name or "", body)
        if method == "GET" and name is None:
            if is_watch(q):
                check_watch(q)
                return 200, ("WATCH", r, api_version, ns, q, how[1] == "PartialObjectMetadata")
            if how[1] == "PartialObjectMetadata":
                raise HTTPError(406, "NotAcceptable", "you requested PartialObjectMetadata, but the "
                                f"requested object is a list (*{r.group or 'core'}.{r.kind}List)")
            return 200, self.lists.serve(r, api_version, ns, q, self.cache_pages,
                                         metadata_only=how[1] is not None)
        nskey = ns or "" if r.namespaced else ""
        with self.cond:
            if method == "POST" and name is None:
                if not isinstance(body, dict):
                    raise HTTPError(400, "BadRequest", "body must be an object")
                body.pop("status", None) if r.status else None
                validate(r, body)
                return 201, view(self.store.write(r, nskey, body, create=True, manager=how[0]), api_version)
            if name is None:
                raise HTTPError(405, "MethodNotAllowed")
            return self._handle_object(method, r, nskey, name, sub == "status", body, api_version, how[0])

    def _handle_object(self, method: str, r: Resource, nskey: str, name: str, status_only: bool, body: Any,
                       api_version: str, manager: str) -> tuple[int, Any]:
        """GET, DELETE, PUT or PATCH of one object (call with `cond` held)."""
        key = (r.group, r.plural, nskey, name)
        cur = self.store.objs.get(key)
        if method == "PUT":
            if not isinstance(body, dict) or (body.get("metadata") or {}).get("name") != name:
                raise HTTPError(400, "BadRequest", "metadata.name must match the URL")
            if not status_only:
                validate(r, body)
            out = self.store.write(r, nskey, body, status_only=status_only, create=False, manager=manager,
                                   expect_rv=(body.get("metadata") or {}).get("resourceVersion"))
            return 200, view(out, api_version)
        if method not in ("GET", "DELETE", "PATCH"):
            raise HTTPError(405, "MethodNotAllowed")
        if cur is None:
            raise HTTPError(404, "NotFound", f'{r.plural} "{name}" not found')
        if method == "GET":
            return 200, view(copy.deepcopy(cur), api_version)
        if method == "DELETE":
            self.store.remove(r, key)
            return 200, view(copy.deepcopy(cur), api_version)
        new = json_patch(cur, body) if isinstance(body, list) else merge_patch(cur, body)
        meta = (body.get("metadata") or {}) if isinstance(body, dict) else {}
        if not status_only:
            validate(r, new)
        out = self.store.write(r, nskey, new, status_only=status_only, create=False,
                               expect_rv=meta.get("resourceVersion"), manager=manager)
        return 200, view(out, api_version)

    def watch(self, send: Send, r: Resource, api_version: str, ns: str | None, q: dict[str, str],
              metadata_only: bool = False) -> None:
        """Stream events until timeoutSeconds, drop_watches()/stop() or a broken connection
        (`metadata_only`: each object a PartialObjectMetadata)."""
        self.watches.stream(send, r, api_version, ns, q, metadata_only)


def _bearer(headers: Mapping[str, str]) -> str | None:
    auth = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
    return auth[7:] if auth.startswith("Bearer ") else None
