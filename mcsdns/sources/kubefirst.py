"""Stage 1 of the first load (ops/load.py): `mcsdns serve`'s Kubernetes source asks for the
lists /ready waits for as soon as the kubeconfig is read, before serve imports asyncio,
msgspec and the rest of the server; those imports run while the API server prepares the
lists (a real one takes 0.3-1 s to send the first bytes of a 10,000-object list).

Also the source's client (`connect`) and the lists it must have (`required`): the source
(sources/kube.py) asks through both, so that the two stages ask for the same. Imports only
the API client and the names of what it reads."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import NamedTuple

from ..kube.apiclient.client import Client
from ..kube.apiclient.transport import Response
from ..kube.config import connect as connect_client
from ..kube.names import MCS_GROUP, PREFERRED, SERVICE_NAME_LABEL
from ..kube.resources import ENDPOINT_SLICES, SERVICE_IMPORTS
from ..ops.errors import ConfigError

PAGE = 500  # objects per page of a list (a first list comes from the watch cache, whole)
Asked = tuple[str, str | None, int, str]  # a list's first page: path, selector, limit, Accept


class Wanted(NamedTuple):
    """A list /ready waits for: a kind, in one namespace or in all."""

    kind: str
    namespace: str | None
    path: str
    selector: str | None


def connect(kubeconfig: str | None, context: str | None, namespaces: list[str]) -> Client:
    """The source's client (no request made); ConfigError naming --kubeconfig or --context,
    or saying there is neither and no in-cluster configuration."""
    try:
        return connect_client(kubeconfig, context, in_cluster=True, pool=2 * max(1, len(namespaces)) + 4,
                              timeout=(5.0, 15.0))
    except ConfigError as e:
        if kubeconfig or context:
            raise
        raise ConfigError(f"{e} (no --kubeconfig or --manifests given, and not in a cluster)") from None


def required(namespaces: list[str], mcs_version: str | None) -> list[Wanted]:
    """ServiceImports (of the served `mcs_version`; none while it is not discovered) and
    imported EndpointSlices, in each of `namespaces` or in all."""
    out: list[Wanted] = []
    scopes: list[str | None] = [*dict.fromkeys(namespaces)] or [None]
    for ns in scopes:
        if mcs_version is not None:
            out.append(Wanted(SERVICE_IMPORTS.kind, ns, SERVICE_IMPORTS.path(ns, version=mcs_version), None))
        out.append(Wanted(ENDPOINT_SLICES.kind, ns, ENDPOINT_SLICES.path(ns), SERVICE_NAME_LABEL))
    return out


class FirstLists:
    """The first page of each required list, asked for at once, each in a thread: the
    EndpointSlices at once, the ServiceImports once discovery names the served version.
    `take` hands a response to the reflector that asks for the same page; whatever failed
    is left to the source, which asks again (and reports the error)."""

    def __init__(self, client: Client, namespaces: list[str], page_size: int = PAGE,
                 accept: str = "application/json") -> None:
        self.client, self.namespaces = client, namespaces
        self.page_size, self.accept = page_size, accept
        self.mcs_version: str | None = None  # as discovered here (None: not served, or failed)
        self._opened: dict[Asked, Response] = {}
        self._threads: dict[Asked, threading.Thread] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._discovery = self._start("kube-first-discovery", self._discover)
        for w in required(namespaces, None):  # EndpointSlices: their version is not discovered
            self._ask(w)

    def discovered(self) -> str | None:
        """The served ServiceImport version once discovery here has ended (None: failed)."""
        self._discovery.join()
        return self.mcs_version

    def take(self, path: str, selector: str | None, limit: int, accept: str) -> Response | None:
        """The response to this first page, if it was asked for here and answered 2xx (once)."""
        self._discovery.join()  # every thread of a ServiceImport list has started
        key = (path, selector, limit, accept)
        with self._lock:
            t = self._threads.pop(key, None)
        if t is None:
            return None
        t.join()
        with self._lock:
            return self._opened.pop(key, None)

    def close(self) -> None:
        """Release what was not taken (the source stops)."""
        with self._lock:
            self._closed = True
            left, self._opened = list(self._opened.values()), {}
        for r in left:
            r.release_conn()

    def _discover(self) -> None:
        try:
            self.mcs_version = self.client.preferred(MCS_GROUP, PREFERRED)
        except Exception:  # noqa: BLE001 - the source discovers again, and reports it
            return
        if self.mcs_version is not None:
            for w in required(self.namespaces, self.mcs_version):
                if w.kind == SERVICE_IMPORTS.kind:
                    self._ask(w)

    def _ask(self, w: Wanted) -> None:
        key = (w.path, w.selector, self.page_size, self.accept)
        with self._lock:
            self._threads[key] = self._start(f"kube-first-{w.kind}", lambda: self._open(key))

    def _open(self, key: Asked) -> None:
        path, selector, limit, accept = key
        try:
            resp = self.client.open_list(path, selector, limit, accept=accept)
        except Exception:  # noqa: BLE001 - the reflector asks again, and reports it
            return
        with self._lock:
            if not self._closed:
                self._opened[key] = resp
                return
        resp.release_conn()

    @staticmethod
    def _start(name: str, target: Callable[[], None]) -> threading.Thread:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        return t
