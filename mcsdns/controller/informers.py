"""Per-member informer caches: namespaces, Services, EndpointSlices, ServiceExports, ServiceImports,
and the Nodes' zone labels (metadata only: `client.METADATA_ONLY`).

Each member runs the one informer set (mcsdns/kube/apiclient/informers.py): discovery of its
cluster ID and MCS API version, then each collection listed once and watched, kept
packed (mcsdns/kube/apiclient/cache.py); every change is turned into the (namespace, name) keys
of the services it affects and handed to `enqueue`. A member is reachable while the
set is healthy (every watch is) and its probe (`probe.Probe`) says it answers; `last_ok` is
the last contact measured (a good probe while the watches were healthy) or recorded in its
Lease; each problem is logged once. A member only read (`read_only`: another member of a
`--local` controller) has just what its exports need: Services, EndpointSlices and
ServiceExports (three watches, no Nodes); our objects there are its own controller's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable
from typing import Any

from ..kube.apiclient.cache import Cache, Entry
from ..kube.apiclient.client import METADATA_ONLY
from ..kube.apiclient.errors import explain
from ..kube.apiclient.informers import DISCOVERY, Informers
from ..kube.apiclient.keys import Key
from ..kube.names import SERVICE_NAME_LABEL
from ..kube.resources import ENDPOINT_SLICES, NAMESPACES, NODES, SERVICES, Resource
from .exports import SERVICE_NAME, is_ours, labels
from .kinds.reads import trim_for
from .locality import ZONE_LABEL, NodeZones, ZoneTracker
from .member.client import Member
from .probe import UNREACHABLE_AFTER, Probe

log = logging.getLogger("mcsdns.controller")
NODES_BACKOFF = (0.5, 10.0)  # a Node list refused (RBAC not updated): retried at most every 10 s

Obj = dict[str, Any]


def slice_index(obj: Obj) -> Hashable | None:
    """("ours", ns, service) for our imported slices, ("src", ns, service) for a Service's own."""
    lb = labels(obj)
    ns = str((obj.get("metadata") or {}).get("namespace") or "")
    if is_ours(obj):
        svc = lb.get(SERVICE_NAME_LABEL)
        return ("ours", ns, svc) if svc else None
    svc = lb.get(SERVICE_NAME)
    return ("src", ns, svc) if svc else None


def node_zone(obj: Obj) -> None:
    """A Node as kept: its name and zone label (the cache's own fields aside)."""
    md = obj.get("metadata") or {}
    zone = (md.get("labels") or {}).get(ZONE_LABEL)
    obj.clear()
    obj["metadata"] = {k: md[k] for k in ("name", "resourceVersion") if k in md}
    if zone is not None:
        obj["metadata"]["labels"] = {ZONE_LABEL: zone}


def import_index(obj: Obj) -> Hashable | None:
    """"ours" for our ServiceImports."""
    return "ours" if is_ours(obj) else None


def service_index(obj: Obj) -> Hashable | None:
    """("ours", ns, service) for our derived Services."""
    if not is_ours(obj):
        return None
    svc = labels(obj).get(SERVICE_NAME_LABEL)
    return ("ours", str((obj.get("metadata") or {}).get("namespace") or ""), svc) if svc else None


class MemberCaches:
    """One member's list+watch caches of the kinds the controller reads, with their indexes."""

    KINDS = ("namespaces", "services", "endpointslices", "serviceexports", "serviceimports")
    READ_KINDS = ("services", "endpointslices", "serviceexports")  # a member only read: its exports

    def __init__(self, member: Member, enqueue: Callable[[Key], None],
                 enqueue_namespace: Callable[[str], None], stop: threading.Event,
                 on_reachable: Callable[[MemberCaches, bool], None] = lambda m, ok: None,
                 watch_timeout: int = 300, service_key: Callable[[Key], Key] = lambda k: k,
                 unreachable_after: float = UNREACHABLE_AFTER, read_only: bool = False) -> None:
        self.member = member
        self.read_only = read_only  # exports read, nothing written: READ_KINDS and no Nodes
        self.kinds = self.READ_KINDS if read_only else self.KINDS
        self.service_key = service_key  # a Service's key -> the key of the service it affects
        self.enqueue, self.enqueue_namespace = enqueue, enqueue_namespace
        self.stop = stop
        self.on_reachable = on_reachable
        self.watch_timeout = watch_timeout
        self.caches: dict[str, Cache] = {}
        self.reachable = False  # the watches are healthy and the probe answers
        self.problem = ""  # the last problem of its watches
        self.watches_ok = False
        self.probe = Probe(member, stop, unreachable_after, on_result=lambda p: self._judge())
        member.on_timeout = self.probe.write_timed_out
        self._contact: float | None = None  # monotonic; the last contact measured
        self._recorded: float | None = None  # ... and the one its Lease recorded
        self._health = threading.Lock()
        self.informers: Informers | None = None  # once started
        self.thread: threading.Thread | None = None
        self.nodes = ZoneTracker(member.name)  # the Nodes' zones, from the Node cache
        self.nodes_error: str | None = None  # why the Nodes cannot be listed/watched now
        self.nodes_synced = False  # the Nodes have been listed (and the services re-queued for them)

    @property
    def last_ok(self) -> float | None:
        """Monotonic time of the last contact: a good probe while the watches were healthy,
        or what the member's Lease recorded (set at start) when later."""
        seen, rec = self._contact, self._recorded
        return rec if seen is None else seen if rec is None else max(seen, rec)

    @last_ok.setter
    def last_ok(self, when: float | None) -> None:
        self._recorded = when

    @property
    def last_sync(self) -> float:
        """Unix time of the last list, event or bookmark (0: none yet)."""
        return self.informers.last_sync if self.informers is not None else 0.0

    # --- startup ---------------------------------------------------------------------
    def start(self) -> None:
        assert self.member.client is not None, "connect() first"
        self.informers = Informers(self.member.client, self.stop, backoff=(0.2, 5.0),
                                   on_health=self._on_health, on_problem=self._on_problem)
        self.thread = threading.Thread(target=self._start, daemon=True, name=f"member-{self.member.name}")
        self.thread.start()
        self.probe.start()

    def _discover(self) -> bool:
        """Read the cluster ID and find the MCS API version; True once both are known."""
        m = self.member
        if m.cluster_id is None:
            m.cluster_id = m.read_cluster_id()
            log.info("cluster %s has cluster ID %s", m.name, m.cluster_id)
        if m.mcs_version is None:
            m.discover()
        return m.mcs_version is not None

    def _start(self) -> None:
        """Discover (retrying), then start every watch."""
        inf, m = self.informers, self.member
        assert inf is not None
        if not inf.discover(self._discover):
            return
        resources: dict[str, Resource] = {"namespaces": NAMESPACES, "services": SERVICES,
                                          "endpointslices": ENDPOINT_SLICES}
        handlers: dict[str, Callable[[Key, Entry | None, Entry | None], None]] = {
            "namespaces": self._namespace, "services": self._service, "endpointslices": self._slice,
            "serviceexports": self._plain, "serviceimports": self._plain}
        index = {"services": service_index, "endpointslices": slice_index,
                 "serviceimports": import_index}
        for kind in self.kinds:
            path = resources[kind].path() if kind in resources else m.mcs_path(kind)
            self.caches[kind] = inf.cache(kind, path, handlers[kind], index=index.get(kind),
                                          transform=trim_for(kind), watch_timeout=self.watch_timeout)
        inf.start()
        assert m.client is not None
        if self.read_only:
            return
        # Not one of the informer set's: Nodes that cannot be read cost locality, not the member.
        self.caches[NODES.plural] = Cache(NODES.plural, m.client, NODES.path(), self._node, self.stop,
                                          on_health=self._nodes_health, transform=node_zone,
                                          accept=METADATA_ONLY, watch_timeout=self.watch_timeout,
                                          backoff=NODES_BACKOFF)
        self.caches[NODES.plural].start()

    # --- health ----------------------------------------------------------------------
    def _on_health(self, ok: bool, changed: bool) -> None:
        self.watches_ok = ok
        self._judge()

    def _judge(self) -> None:
        """Reachable: the watches healthy and the probe answering; a change logged once (a
        watch's problem is `_on_problem`'s) and told to `on_reachable`."""
        with self._health:
            ok = self.watches_ok and self.probe.ok
            if ok and self.probe.last_ok is not None:
                self._contact = self.probe.last_ok
            changed, self.reachable = ok != self.reachable, ok
            why = "" if ok or self.probe.ok else self.probe.why()
        m = self.member
        if changed and ok:
            log.info("cluster %s (%s) reachable", m.name, m.cluster_id,
                     extra={"event": "member_reachable", "cluster": m.name, "cluster_id": m.cluster_id})
        elif changed and why:
            log.warning("cluster %s unreachable: %s", m.name, why,
                        extra={"event": "member_unreachable", "cluster": m.name, "error": why})
        if changed:
            self.on_reachable(self, ok)

    def _on_problem(self, who: str, text: str) -> None:
        err = text if who == DISCOVERY else f"{who}: {text}"
        self.problem = err
        log.warning("cluster %s unreachable: %s", self.member.name, err,
                    extra={"event": "member_unreachable", "cluster": self.member.name, "error": err})

    @property
    def synced(self) -> bool:
        """Every collection has been listed at least once."""
        nodes = self.caches.get(NODES.plural)  # listed, or refused: else a restart would drop hints
        return all(k in self.caches and self.caches[k].synced.is_set() for k in self.kinds) and (
            self.read_only or nodes is not None and (nodes.synced.is_set() or self.nodes_error is not None))

    # --- events -> keys --------------------------------------------------------------
    def _plain(self, k: Key, old: Entry | None, new: Entry | None) -> None:
        self.enqueue(k)

    def _namespace(self, k: Key, old: Entry | None, new: Entry | None) -> None:
        self.enqueue_namespace(k[1])

    def _service(self, k: Key, old: Entry | None, new: Entry | None) -> None:
        for e in (old, new):
            if e is not None and not (self.read_only and isinstance(e.iv, tuple)):
                iv = e.iv
                self.enqueue((k[0], iv[2]) if isinstance(iv, tuple) else self.service_key(k))

    def _node(self, k: Key, old: Entry | None, new: Entry | None) -> None:
        """A change of the member's zones re-queues every service it imports (their hints)."""
        if self.nodes.update(k[1], None if new is None else new.obj()):
            for key in self.keys():
                self.enqueue(key)

    def zones(self) -> NodeZones | None:
        """The member's Nodes' zones, once listed (kept, not forgotten, while a watch fails);
        before that, why they cannot be read, or None."""
        cache = self.caches.get(NODES.plural)
        if cache is not None and cache.synced.is_set():
            return self.nodes.current()
        return NodeZones(error=self.nodes_error) if self.nodes_error else None

    def _nodes_health(self, ok: bool, err: BaseException | None) -> None:
        """A Node list/watch outcome: a new problem logged once (and its end), and every service
        re-queued then and once the Nodes are first listed (the member counts as synced only
        from then on: a pass before it could not use them)."""
        cache = self.caches.get(NODES.plural)
        if ok and cache is not None and not cache.synced.is_set():
            return  # listed, not applied yet: the last error stands until the watch's OK, after it
        first = ok and not self.nodes_synced
        self.nodes_synced |= ok
        text = None if ok else explain(err or Exception("unknown error"))
        if text == self.nodes_error and not first:
            return
        was, self.nodes_error = self.nodes_error, text
        if text is not None:
            log.warning("cluster %s: cannot read the Nodes' zones (locality hints): %s", self.member.name,
                        text)
        elif was is not None:
            log.info("cluster %s: the Nodes' zones are readable again", self.member.name)
        for key in self.keys():
            self.enqueue(key)

    def _slice(self, k: Key, old: Entry | None, new: Entry | None) -> None:
        for e in (old, new):  # a member only read: its own controller's slices are no input
            if e is not None and isinstance(e.iv, tuple) and not (self.read_only and e.iv[0] == "ours"):
                self.enqueue((e.iv[1], e.iv[2]))

    # --- reads -----------------------------------------------------------------------
    def has_namespace(self, ns: str) -> bool:
        if self.read_only:
            return False
        o = self.caches["namespaces"].get(("", ns))
        return o is not None and not (o.get("metadata") or {}).get("deletionTimestamp")

    def export(self, k: Key) -> Obj | None:
        se = self.caches["serviceexports"].get(k)
        return None if se is None or (se.get("metadata") or {}).get("deletionTimestamp") else se

    def service(self, k: Key) -> Obj | None:
        return self.caches["services"].get(k)

    def service_import(self, k: Key) -> Obj | None:
        return None if self.read_only else self.caches["serviceimports"].get(k)

    def source_slices(self, k: Key) -> list[Obj]:
        return sorted(self.caches["endpointslices"].indexed(("src", k[0], k[1])),
                      key=lambda s: str(s["metadata"]["name"]))

    def our_slices(self, k: Key) -> list[Obj]:
        return [] if self.read_only else self.caches["endpointslices"].indexed(("ours", k[0], k[1]))

    def our_services(self, k: Key) -> list[Obj]:
        return [] if self.read_only else self.caches["services"].indexed(("ours", k[0], k[1]))

    def imports(self) -> list[tuple[Key, Obj]]:
        """Every ServiceImport in the cache, with its key."""
        return [] if self.read_only else self.caches["serviceimports"].items()

    def note_written(self, kind: str, obj: Obj | None, k: Key | None = None) -> None:
        """Our write's result (None with `k`: deleted) goes into the `kind` cache."""
        self.caches[kind].note_written(obj, k)

    def keys(self) -> set[Key]:
        """Every service key this member has an export, or an object of ours, for."""
        if not self.caches:
            return set()
        out = set(self.caches["serviceexports"].keys())
        if self.read_only:
            return out
        out.update(self.caches["serviceimports"].indexed_keys("ours"))
        for cache in (self.caches["endpointslices"], self.caches["services"]):
            out.update((iv[1], iv[2]) for iv in cache.index_values()
                       if isinstance(iv, tuple) and iv[0] == "ours")
        return out
