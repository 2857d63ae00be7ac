"""The one Kubernetes API client of the server, the controller and `diagnose`.

Requests go through `transport.Transport` (the kubeconfig's server, TLS, proxy and
credentials, a pool of kept connections), as plain JSON; every failure raises one of
`errors`' taxonomy: `NotFound`, `Conflict`, `Expired`, `Unreachable`, `Rejected`.
Discovery asks one group at a time (`versions`, `preferred`)."""

from __future__ import annotations

import builtins
import json
import threading
from collections import Counter
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

from ... import __version__
from .errors import NotFound, Request, Unreachable, error_for
from .kubeconfig import load as load_kubeconfig
from .transport import Response, Timeout, Transport

Obj = dict[str, Any]
TIMEOUT: Timeout = (3.0, 10.0)
PAGE = 500  # objects per page of a list
USER_AGENT = f"mcsdns/{__version__}"
# Accept headers of a metadata-only list and watch (each object a PartialObjectMetadata), as
# client-go's metadata client sends them; a list asking for the watch's type is 406, and back.
METADATA_ONLY = ("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
                 "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1")


def _query(query: Mapping[str, Any] | None) -> str:
    pairs = [(k, str(v).lower() if isinstance(v, bool) else str(v))
             for k, v in (query or {}).items() if v is not None]
    return "?" + urlencode(pairs) if pairs else ""


class Client:
    """One API server. `name` (a member's) prefixes error messages; `timeout` is the
    default of every request."""

    def __init__(self, transport: Transport, name: str = "", timeout: Timeout = TIMEOUT) -> None:
        self.transport, self.name, self.timeout = transport, name, timeout
        self.counts: Counter[tuple[str, str]] = Counter()  # (method, HTTP code or "<error>") -> requests
        self._counts_lock = threading.Lock()

    def _count(self, method: str, code: str) -> None:
        with self._counts_lock:
            self.counts[(method, code)] += 1

    @classmethod
    def load(cls, kubeconfig: str | None, context: str | None, *, in_cluster: bool = False,
             pool: int | None = None, name: str = "", timeout: Timeout = TIMEOUT) -> Client:
        """From a kubeconfig (`kubeconfig.load`: KubeconfigError), keeping up to `pool`
        connections."""
        return cls(Transport(load_kubeconfig(kubeconfig, context, in_cluster), pool or 10), name, timeout)

    @property
    def host(self) -> str:
        return self.transport.cfg.server.url

    def close(self) -> None:
        self.transport.close()

    def open(self, method: str, path: str, query: Mapping[str, Any] | None = None, body: Any = None,
             timeout: Timeout | None = None, content_type: str = "application/json",
             accept: str = "application/json") -> Response:
        """One request; the unread response of a 2xx answer (stream it, or read `.data`), else
        the error its status maps to (`Unreachable` when there is no answer)."""
        where = self._where(method, path)
        headers = {"Accept": accept, "User-Agent": USER_AGENT}
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = (body if isinstance(body, bytes) else body.encode() if isinstance(body, str)
                    else json.dumps(body).encode())  # bytes and str: already serialized
        try:
            resp = self.transport.send(method, quote(path) + _query(query), data, headers,
                                       timeout or self.timeout)
            if not 200 <= resp.status <= 299:
                answer = resp.data
                resp.release_conn()
        except Unreachable:
            self._count(method, "<error>")
            raise
        except Exception as e:  # the transport's OSErrors (ConnectError, ReadTimeout...), or any other
            self._count(method, "<error>")
            raise Unreachable(f"{where}: {e}") from e
        self._count(method, str(resp.status))
        if not 200 <= resp.status <= 299:
            raise error_for(resp.status, resp.reason or "", answer, Request.of(path, method=method),
                            f"{where}: {resp.status} {resp.reason}", resp.headers.get("Retry-After"))
        return resp

    def open_list(self, path: str, selector: str | None = None, limit: int = PAGE, cont: str | None = None,
                  latest: bool = False, accept: str = "application/json") -> Response:
        """A page of a list, unread: the first, or the one `cont` names. As client-go's
        reflector, a first page asks for resourceVersion "0" (kube-apiserver answers it from
        its watch cache, in one response, instead of paging through etcd: a complete view,
        perhaps a moment old), unless `latest` asks for the latest state."""
        query: dict[str, Any] = {"limit": limit, "labelSelector": selector}
        if cont:
            query["continue"] = cont
        elif not latest:
            query["resourceVersion"] = "0"
        return self.open("GET", path, query, timeout=(5, 60), accept=accept)

    def request(self, method: str, path: str, body: Any = None, query: Mapping[str, Any] | None = None,
                timeout: Timeout | None = None, content_type: str = "application/json") -> Any:
        """One request; its decoded JSON body (None when empty; ValueError when it is not JSON)."""
        resp = self.open(method, path, query, body, timeout, content_type)
        try:
            data = resp.data
        except Exception as e:  # the answer broke off
            raise Unreachable(f"{self._where(method, path)}: {e}") from e
        try:
            return json.loads(data) if data else None
        except RecursionError:
            raise ValueError(f"{self._where(method, path)}: the answer is nested too deep") from None

    def _where(self, method: str, path: str) -> str:
        return f"{self.name}: {method} {path}" if self.name else f"{method} {path}"

    def get(self, path: str, query: Mapping[str, Any] | None = None) -> Any:
        return self.request("GET", path, query=query)

    def list(self, path: str, selector: str | None = None) -> list[Obj]:
        """A collection's items, every page."""
        out: list[Obj] = []
        query: dict[str, Any] = {"limit": PAGE, "labelSelector": selector}
        while True:
            data = self.get(path, query)
            out.extend(data.get("items") or [])
            cont = (data.get("metadata") or {}).get("continue")
            if not cont:
                return out
            query["continue"] = cont

    def watch(self, path: str, resource_version: str | None, selector: str | None = None,
              timeout_seconds: int = 300, idle: float = 75.0, accept: str = "application/json") -> Response:
        """Open a watch of a collection from `resource_version`, with bookmarks: the unread,
        streamed response (one JSON event a line); a read times out after `idle` s."""
        query = {"watch": True, "resourceVersion": resource_version, "allowWatchBookmarks": True,
                 "timeoutSeconds": timeout_seconds, "labelSelector": selector}
        return self.open("GET", path, query, timeout=(5, idle), accept=accept)

    def versions(self, group: str) -> builtins.list[str]:
        """The versions the server serves of an API group, preferred first ([] when none)."""
        try:
            data = self.get(f"/apis/{group}")
        except NotFound:
            return []
        return [str(v.get("version")) for v in data.get("versions") or []]

    def preferred(self, group: str, prefer: tuple[str, ...]) -> str | None:
        """The first of `prefer` the server serves of `group`; None when it serves none."""
        served = self.versions(group)
        return next((v for v in prefer if v in served), None)
