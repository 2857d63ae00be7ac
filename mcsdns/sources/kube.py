"""Kubernetes API source: list+watch ServiceImports, EndpointSlices and ClusterProperties.

Discovery, then one worker thread per watched collection (kind x namespace), in
the shared informer set (mcsdns/kube/apiclient/informers.py: the reflector loop of
mcsdns/kube/apiclient/reflector.py over the one client, mcsdns/kube/apiclient/client.py), reading
raw JSON:

- list (paged) -> the Store gets the complete set (deletions included), then
  watch from the list's resourceVersion with bookmarks; a watch that ends
  (timeoutSeconds, idle read timeout) resumes from the last resourceVersion;
  410 Gone (HTTP status or ERROR event) relists;
- errors back off with full jitter (0.2 s doubling to 10 s, longer where a 429
  or 5xx asks with Retry-After, up to 30 s), a watch that fails at once as
  client-go's does (0.8 s doubling to 30 s); an object that does not decode is
  skipped and counted (errors "bad_item", "bad_event"); the last known
  data keeps being served; each distinct error is logged once, with the API's
  own message and, for a 403, the RBAC rule that would allow the request
  (mcsdns/kube/apiclient/errors.py); getting connected is logged once per outage.

Threads only parse; Store methods run on the event loop (events are queued
and applied in batches, coalesced per object). `synced` turns true once the
first lists of ServiceImports and EndpointSlices are in the Store, and stays
true. ServiceImports use multicluster.x-k8s.io v1beta1 when served, else
v1alpha1; ClusterProperties (about.k8s.io) are watched only when served.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple

from ..data.objects import CLUSTER_PROPERTY, ENDPOINT_SLICE, MODELS, SERVICE_IMPORT
from ..data.parsing import obj_key, prepare
from ..data.store import Store
from ..kube.apiclient.client import Client
from ..kube.apiclient.informers import DISCOVERY, Informers
from ..kube.apiclient.keys import Key
from ..kube.apiclient.reflector import Reflector
from ..kube.names import ABOUT_GROUP, MCS_GROUP, PREFERRED
from ..kube.resources import CLUSTER_PROPERTIES, ENDPOINT_SLICES
from ..ops.stats import Put
from . import Inbox, Sink, publish_source
from .kubefirst import FirstLists, connect, required

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
    path: str
    selector: str | None
    required: bool  # counts for `synced`
    sole: bool  # the only collection of its kind: a relist may use Store.replace
    listed: bool = False  # a first list reached the Store (set on the loop)
    count: int = 0  # objects in its last list
    applied: set[Key] = field(default_factory=set, repr=False)  # of the list under way, applied in parts
    applied_list: int = 0  # which list of its reflector (`begun`) `applied` is of: a failed one's are dropped
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
                 on_synced: Callable[[], None] = lambda: None, whole: bool = False,
                 first: FirstLists | None = None, later: bool = False) -> None:
        self.store = store
        self.first = first  # the client, and the lists asked for already (ops/load.py, stage 1)
        self.whole = whole  # objects reach `store` whole (the --workers relay reads them), not cut
        # listed slices may keep their endpoints as text until read, before DNS answers from
        # data (ops/load.py, stage 3): nothing but this process's queries reads the store
        self.later = later and not whole
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
        self.last_error = ""  # the explanation of the last error seen
        self._lock = threading.Lock()
        self._stop = threading.Event()
        # (collection, "list"|event type, payload), from the reflector threads to the loop
        self._inbox: Inbox[tuple[Collection, str, Any]] = Inbox(self._apply)
        self._client: Client | None = None
        if first is not None:
            self._client, self.host = first.client, first.client.host
        self._informers: Informers | None = None
        self._main: threading.Thread | None = None

    @property
    def synced(self) -> bool:
        return self._synced

    def publish(self, put: Put) -> None:
        publish_source(put, self.name, self.connected, self.last_sync, self.errors)

    # ---- lifecycle (loop thread) ----

    def configure(self) -> None:
        """Load the client configuration (once); ConfigError naming --kubeconfig/--context."""
        if self._client is None:
            self._client = self._load()

    def begin(self) -> None:
        """Start reading (discovery, then the lists and watches, in threads), before there is
        an event loop if need be: what they read waits until `start`. ConfigError when the
        client configuration does not load."""
        if self._main is not None:
            return
        self.configure()
        assert self._client is not None
        self._informers = Informers(self._client, self._stop, backoff=self.backoff, errors=self.errors,
                                    on_health=self._on_health, on_problem=self._on_problem)
        self._main = threading.Thread(target=self._run, name="kube-discovery", daemon=True)
        self._main.start()

    async def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.begin()
        self._inbox.attach(loop)

    async def stop(self) -> None:
        self._stop.set()
        threads = self._informers.interrupt() if self._informers is not None else []
        threads = [t for t in [self._main, *threads] if t is not None]

        def join() -> None:
            deadline = time.monotonic() + 2.0
            for t in threads:
                t.join(max(0.0, deadline - time.monotonic()))

        await asyncio.get_running_loop().run_in_executor(None, join)
        if self.first is not None:
            self.first.close()
        if self._client is not None:
            self._client.close()

    def reload(self) -> None:
        """Relist every collection now (SIGHUP)."""
        if self._informers is not None:
            self._informers.relist()

    def _load(self) -> Client:
        c = connect(self.kubeconfig, self.context, self.namespaces)
        self.host = c.host
        return c

    # ---- connection state (any thread) ----

    def _on_health(self, ok: bool, changed: bool) -> None:
        inf = self._informers
        assert inf is not None
        self.connected = ok
        self.last_sync = max(self.last_sync, inf.last_sync)
        self.last_error = inf.last_error
        if ok and changed:
            watching = inf.labels()
            log.info("Kubernetes API %s: connected, watching %s", self.host,
                     ", ".join(watching) or "nothing yet",
                     extra={"event": "source_connected", "api": self.host, "watching": watching})

    def _on_problem(self, who: str, text: str) -> None:
        if self.has_data is None:
            then = "retrying"
        elif self.has_data():
            then = "serving the last known data and retrying"
        else:
            then = "no data yet: answering SERVFAIL until the first sync, retrying"
        log.warning("Kubernetes API %s: %s%s; %s", self.host, "" if who == DISCOVERY else f"{who}: ",
                    text, then, extra={"event": "source_error", "api": self.host, "error": text})

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
        client, inf = self._client, self._informers
        assert client is not None and inf is not None
        warned = False

        first = self.first.discovered() if self.first is not None else None

        def step() -> bool:
            nonlocal warned, first
            self.mcs_version, first = first or client.preferred(MCS_GROUP, PREFERRED), None
            if self.mcs_version is None:
                if not warned:
                    warned = True
                    log.warning("Kubernetes API %s does not serve %s v1beta1 or v1alpha1 (ServiceImport CRD "
                                "missing?); not ready, checking again", self.host, MCS_GROUP)
                return False
            self.about_version = client.preferred(ABOUT_GROUP, PREFERRED)
            return True

        if not inf.discover(step):
            return
        log.info("watching ServiceImports %s/%s, EndpointSlices %s%s", MCS_GROUP, self.mcs_version,
                 ENDPOINT_SLICES.api_version(), f", ClusterProperties {ABOUT_GROUP}/{self.about_version}"
                 if self.about_version else " (no ClusterProperty API)")
        self._add(*self._collections())  # all at once: `synced` needs every required first list
        while self.about_version is None and not self._stop.wait(self.rediscover):
            try:
                self.about_version = client.preferred(ABOUT_GROUP, PREFERRED)
            except Exception:  # noqa: BLE001 - the watches report outages
                continue
            if self.about_version is not None:
                log.info("ClusterProperty API %s/%s appeared; watching it", ABOUT_GROUP, self.about_version)
                self._add(self._cluster_properties())

    def _collections(self) -> list[Collection]:
        sole = len(self.namespaces) <= 1
        out = [Collection(w.kind, w.namespace, w.path, w.selector, required=True, sole=sole)
               for w in required(self.namespaces, self.mcs_version)]
        if self.about_version is not None:
            out.append(self._cluster_properties())
        return out

    def _cluster_properties(self) -> Collection:
        path = CLUSTER_PROPERTIES.path(version=self.about_version)
        return Collection(CLUSTER_PROPERTY, None, path, None, required=False, sole=True)

    def _add(self, *cs: Collection) -> None:
        inf = self._informers
        assert inf is not None
        with self._lock:
            self.collections.extend(cs)
        for c in cs:
            c.reflector = inf.watch(
                c.label, c.path, c.selector, kind=c.kind, key=obj_key, page_size=self.page_size,
                watch_timeout=self.watch_timeout, idle_timeout=self.idle_timeout,
                on_list=partial(self._on_list, c), on_event=partial(self._on_event, c),
                on_part=partial(self._on_part, c),
                # parsed in the reflector thread as it arrives (ops/load.py, stage 3)
                transform=None if c.kind == CLUSTER_PROPERTY else partial(
                    prepare, whole=self.whole, later=self._later if self.later else None),
                typed=None if c.kind == CLUSTER_PROPERTY else MODELS[c.kind].SOURCE.decoder(self.later),
                first=self.first.take if self.first is not None and c.required else None)
        inf.start()

    def _later(self) -> bool:
        return self.has_data is not None and not self.has_data()

    def _on_part(self, c: Collection, items: list[Obj]) -> None:
        assert c.reflector is not None
        self._post(c, "part", (c.reflector.begun, items))

    def _on_list(self, c: Collection, items: list[Obj], deletes: set[Key]) -> None:
        assert c.reflector is not None
        self._post(c, "list", (c.reflector.begun, items, deletes))

    def _on_event(self, c: Collection, typ: str, obj: Obj) -> None:
        self.last_sync = time.time()
        self._post(c, typ, obj)

    # ---- hand-over to the loop ----

    def _post(self, c: Collection, what: str, payload: Any) -> None:
        self._inbox.post((c, what, payload))

    def _apply(self, queue: list[tuple[Collection, str, Any]]) -> None:
        """Apply queued lists and events in order; runs of events are coalesced per object."""
        run: dict[tuple[str, Key], tuple[str, Obj]] = {}
        for c, what, payload in queue:
            if what not in ("list", "part"):
                run[(c.kind, obj_key(payload))] = (what, payload)
                continue
            self._apply_run(run)
            run = {}
            try:
                self._apply_list(c, what, payload)
            except Exception:  # pragma: no cover - the Store skips malformed objects itself
                log.exception("%s: applying the list failed", c.label)
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

    def _apply_list(self, c: Collection, what: str, payload: Any) -> None:
        """A part of a list (applied as it arrives, so that the zone is built while the
        rest is still coming) or its end: what is left, and the objects it no longer has."""
        seq, items = payload[0], payload[1]
        if seq != c.applied_list:  # a list that failed after some parts left keys of its own
            c.applied, c.applied_list = set(), seq
        if what == "part":
            c.applied.update(obj_key(o) for o in items)
            self.store.apply(_consume(items), [])
            return
        deletes = payload[2]
        applied, c.applied = c.applied, set()
        c.count = len(applied) + len(items)
        if c.sole:
            self.store.replace(c.kind, _consume(items), applied)
        else:
            self.store.apply(_consume(items), [(c.kind, k) for k in deletes])
        c.listed = True

    def _apply_run(self, run: dict[tuple[str, Key], tuple[str, Obj]]) -> None:
        if not run:
            return
        upserts = [obj for typ, obj in run.values() if typ != "DELETED"]
        deletes = [(kind, key) for (kind, key), (typ, _) in run.items() if typ == "DELETED"]
        try:
            self.store.apply(upserts, deletes)
        except Exception:  # pragma: no cover - the Store skips malformed objects itself
            log.exception("applying %d watch events failed", len(run))


class Begun(NamedTuple):
    """A Kubernetes source already reading into its store (`begin_reading`)."""

    store: Store
    source: KubeSource


def begin_reading(kubeconfig: str | None, context: str | None, namespaces: list[str] | None,
                  first: FirstLists | None = None, later: bool = False) -> Begun:
    """A source reading into a new Store at once (taking up `first`, the lists asked for
    already), before `serve` imports and sets up the rest (ops/load.py, stages 1-3):
    roles.loader takes it up and says when DNS answers from data; until then there is none.
    ConfigError when the configuration does not load."""
    store = Store()
    source = KubeSource(store, kubeconfig, context, namespaces, has_data=lambda: False, first=first,
                        later=later)
    source.begin()
    return Begun(store, source)
