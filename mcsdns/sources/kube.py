"""Kubernetes API source: list+watch ServiceImports, EndpointSlices and ClusterProperties.

One worker thread per watched collection (kind x namespace) runs the shared
reflector loop (mcsdns/kube/reflector.py) with the official `kubernetes`
client, reading raw JSON:

- list (paged) -> the Store gets the complete set (deletions included), then
  watch from the list's resourceVersion with bookmarks; a watch that ends
  (timeoutSeconds, idle read timeout) resumes from the last resourceVersion;
  410 Gone (HTTP status or ERROR event) relists;
- errors back off with full jitter (0.2 s doubling to 10 s); the last known
  data keeps being served; each distinct error is logged once, with the API's
  own message and, for a 403, the RBAC rule that would allow the request
  (mcsdns/kube/errors.py); getting connected is logged once per outage.

Threads only parse; Store methods run on the event loop (events are queued
and applied in batches, coalesced per object). `synced` turns true once the
first lists of ServiceImports and EndpointSlices are in the Store, and stays
true. ServiceImports use multicluster.x-k8s.io v1beta1 when served, else
v1alpha1; ClusterProperties (about.k8s.io) are watched only when served.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kubernetes import client

from ..data.store import CLUSTER_PROPERTY, ENDPOINT_SLICE, SERVICE_IMPORT, ObjKey, obj_key
from ..kube.config import KubeconfigError, client_configuration
from ..kube.errors import Problems, error_kind, explain
from ..kube.names import ABOUT_GROUP, MCS_GROUP, PREFERRED, SERVICE_NAME_LABEL
from ..kube.reflector import Backoff, Lister, PathLister, Reflector
from ..ops.errors import ConfigError
from ..ops.stats import Put
from . import Inbox, Sink, publish_source

log = logging.getLogger("mcsdns.kube")

Obj = dict[str, Any]


def _consume(items: list[Obj]) -> Iterator[Obj]:
    """Each item once, in order, dropped from `items` as it is taken: a decoded object is
    freed as soon as the store has parsed it, and what is parsed reuses its memory
    (less of the heap left fragmented after a large list)."""
    items.reverse()
    while items:
        yield items.pop()


@dataclass
class Collection:
    """One watched collection: a kind, in one namespace or all."""

    kind: str
    namespace: str | None
    lister: Lister
    required: bool  # counts for `synced`
    sole: bool  # the only collection of its kind: a relist may use Store.replace
    listed: bool = False  # a first list reached the Store (set on the loop)
    count: int = 0  # objects in its last list
    healthy: bool = False
    reflector: Reflector | None = field(default=None, repr=False)

    @property
    def label(self) -> str:
        what = {CLUSTER_PROPERTY: "ClusterProperties"}.get(self.kind, self.kind + "s")
        if self.kind == CLUSTER_PROPERTY:
            return what
        return f"{what} in {self.namespace or 'all namespaces'}"


class KubeSource:
    """List+watch of ServiceImports, EndpointSlices and ClusterProperties from one API server."""

    name = "kube"

    def __init__(self, store: Sink, kubeconfig: str | None, context: str | None,
                 namespaces: list[str] | None = None, *, page_size: int = 500,
                 watch_timeout: int = 300, idle_timeout: float = 75.0,
                 backoff: tuple[float, float] = (0.2, 10.0), rediscover: float = 60.0,
                 has_data: Callable[[], bool] | None = None,
                 on_synced: Callable[[], None] = lambda: None) -> None:
        self.store = store
        self.on_synced = on_synced  # called once, right after the first full sync is applied
        self.has_data = has_data  # whether DNS answers from data; None: not serving (`records`)
        self.kubeconfig, self.context = kubeconfig, context
        self.namespaces = list(dict.fromkeys(namespaces or []))
        self.page_size, self.watch_timeout, self.idle_timeout = page_size, watch_timeout, idle_timeout
        self.backoff, self.rediscover = backoff, rediscover
        self.connected = False  # metrics: every watch is established
        self.last_sync = 0.0  # metrics: unix time of the last successful list or watch event
        self.errors: Counter[str] = Counter()  # metrics: errors by kind
        self.mcs_version: str | None = None
        self.about_version: str | None = None
        self.host = ""
        self.collections: list[Collection] = []
        self._synced = False
        self._ok = False  # every watch healthy, for logging
        self._problems = Problems()
        self.last_error = ""  # the explanation of the last error seen
        self._lock = threading.Lock()
        self._stop = threading.Event()
        # (collection, "list"|event type, payload), from the reflector threads to the loop
        self._inbox: Inbox[tuple[Collection, str, Any]] = Inbox(self._apply)
        self._api: Any = None
        self._main: threading.Thread | None = None

    @property
    def synced(self) -> bool:
        return self._synced

    def publish(self, put: Put) -> None:
        publish_source(put, self.name, self.connected, self.last_sync, self.errors)

    # ---- lifecycle (loop thread) ----

    def configure(self) -> None:
        """Load the client configuration (once); ConfigError naming --kubeconfig/--context."""
        if self._api is None:
            self._api = self._client()

    async def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._inbox.loop = loop
        self.configure()
        self._main = threading.Thread(target=self._run, name="kube-discovery", daemon=True)
        self._main.start()

    async def stop(self) -> None:
        self._stop.set()
        for c in list(self.collections):
            if c.reflector is not None:
                c.reflector.interrupt()
        threads = [t for t in [self._main, *(c.reflector.thread for c in self.collections if c.reflector)]
                   if t is not None]

        def join() -> None:
            deadline = time.monotonic() + 2.0
            for t in threads:
                t.join(max(0.0, deadline - time.monotonic()))

        await asyncio.get_running_loop().run_in_executor(None, join)
        if self._api is not None:
            self._api.close()

    def reload(self) -> None:
        """Relist every collection now (SIGHUP)."""
        for c in list(self.collections):
            if c.reflector is not None:
                c.reflector.request_relist()

    def _client(self) -> Any:
        try:
            cfg = client_configuration(self.kubeconfig, self.context, in_cluster=True)
        except KubeconfigError as e:
            given = " ".join(f"{flag} {v}" for flag, v in (("--kubeconfig", self.kubeconfig),
                                                           ("--context", self.context)) if v)
            where = given or "no --kubeconfig or --manifests, not in a cluster, and ~/.kube/config"
            raise ConfigError(f"{where}: cannot load the Kubernetes client configuration: {e}") from None
        cfg.connection_pool_maxsize = 2 * max(1, len(self.namespaces)) + 4
        self.host = cfg.host
        return client.ApiClient(cfg)

    # ---- connection state (any thread) ----

    def _health(self, c: Collection | None, ok: bool, err: BaseException | None = None) -> None:
        failed = None if ok else err or Exception("unknown error")
        text = ""
        if failed is not None:
            self.errors[error_kind(failed)] += 1
            request = c.reflector.request if c is not None and c.reflector is not None else None
            text = explain(failed, request)
            self.last_error = f"{c.label}: {text}" if c is not None else text
        new = self._problems.update(c.label if c is not None else "discovery", failed, text)
        with self._lock:
            if c is not None:
                c.healthy = ok
            now_ok = ok and all(x.healthy for x in self.collections)
            self.connected = now_ok
            became_ok, self._ok = now_ok and not self._ok, now_ok
        if ok:
            self.last_sync = time.time()
        if became_ok:
            watching = [x.label for x in self.collections]
            log.info("Kubernetes API %s: connected, watching %s", self.host,
                     ", ".join(watching) or "nothing yet",
                     extra={"event": "source_connected", "api": self.host, "watching": watching})
        elif new:
            if self.has_data is None:
                then = "retrying"
            elif self.has_data():
                then = "serving the last known data and retrying"
            else:
                then = "no data yet: answering SERVFAIL until the first sync, retrying"
            log.warning("Kubernetes API %s: %s%s; %s", self.host,
                        f"{c.label}: " if c is not None else "", text, then,
                        extra={"event": "source_error", "api": self.host, "error": text})

    def target(self) -> str:
        """What this source waits for, for a person."""
        return f"ServiceImports and EndpointSlices from the Kubernetes API {self.host}"

    def pending(self) -> str:
        """What is not synced yet, and the last error, for a person ("" once synced)."""
        if self._synced:
            return ""
        with self._lock:
            todo = [c.label for c in self.collections if c.required and not c.listed]
        what = ", ".join(todo) if todo else f"discovery of the {MCS_GROUP} API"
        return f"{what} from {self.host}: " + (f"last error: {self.last_error}" if self.last_error
                                               else "no answer yet")

    # ---- discovery (kube-discovery thread) ----

    def _run(self) -> None:
        backoff = Backoff(*self.backoff)
        warned = False
        while not self._stop.is_set():
            try:
                served = self._served_groups()
            except Exception as e:  # noqa: BLE001 - any failure is retried
                self._health(None, False, e)
                self._stop.wait(backoff.next())
                continue
            backoff.reset()
            self._problems.update("discovery", None)
            self.mcs_version = next((v for v in PREFERRED if v in served.get(MCS_GROUP, ())), None)
            if self.mcs_version is not None:
                self.about_version = next((v for v in PREFERRED if v in served.get(ABOUT_GROUP, ())), None)
                break
            if not warned:
                warned = True
                log.warning("Kubernetes API %s does not serve %s v1beta1 or v1alpha1 (ServiceImport CRD "
                            "missing?); not ready, checking again", self.host, MCS_GROUP)
            self._stop.wait(self.backoff[1])
        if self._stop.is_set():
            return
        log.info("watching ServiceImports %s/%s, EndpointSlices discovery.k8s.io/v1%s", MCS_GROUP,
                 self.mcs_version, f", ClusterProperties {ABOUT_GROUP}/{self.about_version}"
                 if self.about_version else " (no ClusterProperty API)")
        self._add(*self._collections())  # all at once: `synced` needs every required first list
        while self.about_version is None and not self._stop.wait(self.rediscover):
            try:
                self.about_version = next(
                    (v for v in PREFERRED if v in self._served_groups().get(ABOUT_GROUP, ())), None)
            except Exception:  # noqa: BLE001 - the watches report outages
                continue
            if self.about_version is not None:
                log.info("ClusterProperty API %s/%s appeared; watching it", ABOUT_GROUP, self.about_version)
                self._add(self._cluster_properties())

    def _served_groups(self) -> dict[str, list[str]]:
        resp: Any = client.ApisApi(self._api).get_api_versions(_preload_content=False,
                                                                _request_timeout=(5, 15))
        data = json.loads(resp.data)
        return {g["name"]: [v["version"] for v in g.get("versions") or []] for g in data.get("groups") or []}

    def _collections(self) -> list[Collection]:
        scopes: list[str | None] = list(self.namespaces) or [None]
        sole = len(scopes) == 1
        out: list[Collection] = []
        for ns in scopes:
            where = f"/namespaces/{ns}" if ns is not None else ""
            si = PathLister(self._api, f"/apis/{MCS_GROUP}/{self.mcs_version}{where}/serviceimports")
            es = PathLister(self._api, f"/apis/discovery.k8s.io/v1{where}/endpointslices",
                            label_selector=SERVICE_NAME_LABEL)
            out.append(Collection(SERVICE_IMPORT, ns, si, required=True, sole=sole))
            out.append(Collection(ENDPOINT_SLICE, ns, es, required=True, sole=sole))
        if self.about_version is not None:
            out.append(self._cluster_properties())
        return out

    def _cluster_properties(self) -> Collection:
        lister = PathLister(self._api, f"/apis/{ABOUT_GROUP}/{self.about_version}/clusterproperties")
        return Collection(CLUSTER_PROPERTY, None, lister, required=False, sole=True)

    def _add(self, *cs: Collection) -> None:
        with self._lock:
            self.collections.extend(cs)
        for c in cs:
            c.reflector = Reflector(
                c.label, c.lister, kind=c.kind, key=obj_key, stop=self._stop, page_size=self.page_size,
                watch_timeout=self.watch_timeout, idle_timeout=self.idle_timeout, backoff=self.backoff,
                on_list=partial(self._on_list, c), on_event=partial(self._on_event, c),
                on_health=partial(self._health, c),
                on_error=self._count_error)
            c.reflector.start(f"kube-{c.kind}-{c.namespace or 'all'}")

    def _count_error(self, kind: str) -> None:
        self.errors[kind] += 1

    def _on_list(self, c: Collection, items: list[Obj], deletes: set[ObjKey]) -> None:
        self._post(c, "list", (items, deletes))

    def _on_event(self, c: Collection, typ: str, obj: Obj) -> None:
        self.last_sync = time.time()
        self._post(c, typ, obj)

    # ---- hand-over to the loop ----

    def _post(self, c: Collection, what: str, payload: Any) -> None:
        self._inbox.post((c, what, payload))

    def _apply(self, queue: list[tuple[Collection, str, Any]]) -> None:
        """Apply queued lists and events in order; runs of events are coalesced per object."""
        run: dict[tuple[str, ObjKey], tuple[str, Obj]] = {}
        for c, what, payload in queue:
            if what != "list":
                run[(c.kind, obj_key(payload))] = (what, payload)
                continue
            self._apply_run(run)
            run = {}
            items, deletes = payload
            c.count = len(items)
            try:
                if c.sole:
                    self.store.replace(c.kind, _consume(items))
                else:
                    self.store.apply(_consume(items), [(c.kind, k) for k in deletes])
            except Exception:  # pragma: no cover - the Store skips malformed objects itself
                log.exception("%s: applying the list failed", c.label)
            c.listed = True
        self._apply_run(run)
        if not self._synced and all(c.listed for c in self.collections if c.required) and any(
                c.required for c in self.collections):
            self._synced = True  # the Store may go on applying the lists over a few loop turns
            imports = sum(c.count for c in self.collections if c.kind == SERVICE_IMPORT)
            slices = sum(c.count for c in self.collections if c.kind == ENDPOINT_SLICE)
            log.info("initial sync complete: %d ServiceImports, %d EndpointSlices", imports, slices,
                     extra={"event": "synced", "source": "kubernetes", "service_imports": imports,
                            "endpoint_slices": slices})
            self.on_synced()

    def _apply_run(self, run: dict[tuple[str, ObjKey], tuple[str, Obj]]) -> None:
        if not run:
            return
        upserts = [obj for typ, obj in run.values() if typ != "DELETED"]
        deletes = [(kind, key) for (kind, key), (typ, _) in run.items() if typ == "DELETED"]
        try:
            self.store.apply(upserts, deletes)
        except Exception:  # pragma: no cover - the Store skips malformed objects itself
            log.exception("applying %d watch events failed", len(run))
