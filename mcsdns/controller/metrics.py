"""The controller's Prometheus metrics: declared once with `ops.stats.define`, as the
server's are, and published from the Manager at scrape time. A member cluster is named by
the label `member` (not `cluster`, which kube-prometheus keeps for the cluster a series
comes from). The work-queue and API-client series mean what client-go's `workqueue_*` and
`rest_client_requests_total` mean, under mcsdns_controller_ names."""

from __future__ import annotations

import time
import weakref
from functools import partial

from prometheus_client import CollectorRegistry, generate_latest

from ..kube.apiclient.client import Client
from ..kube.apiclient.expiry import Validity, of_identity
from ..ops import process
from ..ops.metrics import SnapshotCollector
from ..ops.stats import Put, Stats, define, put_histogram
from .carry import Carry
from .kinds import ENDPOINT_SLICES
from .locality import NAMED, OTHERS
from .manager import Manager
from .queue import BOUNDS

MEMBER = "member"  # the label naming a member cluster

RECONCILES = define("mcsdns_controller_reconciles_total", "counter",
                    "Reconciles of one service key, by result (ok, retry: a write failed and the key was "
                    "re-queued, error).", ("result",))
RECONCILE_TIME = define("mcsdns_controller_reconcile_duration_seconds", "histogram",
                        "Time a worker spent on one service key, from taking it off the queue to done "
                        "(client-go's workqueue_work_duration_seconds, controller-runtime's "
                        "controller_runtime_reconcile_time_seconds).")
QUEUE_DEPTH = define("mcsdns_controller_queue_depth", "gauge",
                     "Service keys waiting (queued or delayed), summed over the members' queues.")
MEMBER_QUEUE_DEPTH = define("mcsdns_controller_member_queue_depth", "gauge",
                            "Service keys waiting (queued or delayed) for writes into one member: "
                            "each member has its own queue, so a slow member's backlog shows here alone.",
                            (MEMBER,))
QUEUE_ADDS = define("mcsdns_controller_queue_adds_total", "counter",
                    "Service keys queued (a key already waiting is not counted again).")
QUEUE_RETRIES = define("mcsdns_controller_queue_retries_total", "counter",
                       "Service keys re-queued with backoff after a failed reconcile.")
QUEUE_WAIT = define("mcsdns_controller_queue_wait_seconds", "histogram",
                    "Time a service key waited in the queue before a worker took it "
                    "(client-go's workqueue_queue_duration_seconds).")
API_REQUESTS = define("mcsdns_controller_api_requests_total", "counter",
                      "Kubernetes API requests by member, HTTP method and status code (<error>: no "
                      "answer), as client-go's rest_client_requests_total.", (MEMBER, "method", "code"))
WRITES = define("mcsdns_controller_writes_total", "counter",
                "API writes that landed (answered 2xx), by member, resource and verb.",
                (MEMBER, "resource", "verb"))
WRITE_ATTEMPTS = define("mcsdns_controller_write_attempts_total", "counter",
                        "API writes tried, landed or not (refused, failed, timed out), by member, resource "
                        "and verb.", (MEMBER, "resource", "verb"))
REACHABLE = define("mcsdns_controller_member_reachable", "gauge",
                   "1 while the member answers its probe (a GET with a 2 s deadline) and every watch on "
                   "it is healthy.",
                   (MEMBER,))
UNREACHABLE = define("mcsdns_controller_member_unreachable_total", "counter",
                     "Times the member's probe found it unreachable (no answer, a 5xx such as etcd down, "
                     "or a write timed out).", (MEMBER,))
LAST_CONTACT = define("mcsdns_controller_member_last_contact_timestamp_seconds", "gauge",
                      "Unix time of the last contact the controller measured with the member (a good probe "
                      "while its watches were healthy), or recorded in its Lease: the Endpoint TTL counts "
                      "from it (absent before any).", (MEMBER,))
LAST_SYNC = define("mcsdns_controller_member_last_sync_timestamp_seconds", "gauge",
                   "Unix time of the member's last list, watch event or bookmark.", (MEMBER,))
UNSERVED = define("mcsdns_controller_unserved_ports", "gauge",
                  "Exported ports that no port of their merged service serves (their endpoints get no "
                  "traffic), by exporting member.", (MEMBER,))
EVENTS = define("mcsdns_controller_events_total", "counter",
                "Kubernetes Events written on ServiceExports (created, or a repeated one counted), by "
                "member, type and reason.", (MEMBER, "type", "reason"))
EVENTS_DROPPED = define("mcsdns_controller_events_dropped_total", "counter",
                        "Events not written, by member and why: rate (the per-object limit), queue "
                        "(the writer's queue full), error (the API refused it).", (MEMBER, "why"))
LOCALITY = define("mcsdns_controller_locality_degraded", "gauge",
                  "Services that set trafficDistribution but get no locality hints in the member, by why "
                  "(too-many-zones, nodes-unreadable) and service (namespace/name): 1 for each of the first "
                  f"{NAMED} per member and why, the rest counted under service=\"{OTHERS}\"; absent: none.",
                  (MEMBER, "reason", "service"))
UNLABELED_NODES = define("mcsdns_controller_locality_unlabeled_nodes", "gauge",
                         "The member's Nodes without a topology.kubernetes.io/zone label: each spreads over "
                         "every cluster (kube-proxy ignores hints there); the others keep their hints.",
                         (MEMBER,))
CREDENTIAL_EXPIRES = define("mcsdns_controller_member_credential_expiry_timestamp_seconds", "gauge",
                            "Unix time the member's credential stops working: its JWT token's exp or its "
                            "client certificate's notAfter, the earlier (absent when neither says).",
                            (MEMBER,))
CREDENTIAL_ISSUED = define("mcsdns_controller_member_credential_issued_timestamp_seconds", "gauge",
                           "Unix time that credential was issued (iat, notBefore): with the expiry, its "
                           "lifetime (absent when it does not say).", (MEMBER,))
LEADER = define("mcsdns_controller_leader", "gauge", "1 while this replica may write.")
READY = define("mcsdns_controller_ready", "gauge", "1 after the first full sync.")
FILE_REFUSED = define("mcsdns_controller_member_file_refused", "gauge",
                      "1 while the member's --members-dir file is refused for carrying `field` (a file path "
                      "or a program: a member file is data only); gone once the file is fixed or removed.",
                      (MEMBER, "field"))
WRITER_CONFLICTS = define("mcsdns_controller_writer_conflicts", "gauge",
                          "Other controllers (writer identities) found writing this one's objects in the "
                          "member, whose objects it leaves to them while they write.", (MEMBER,))
NAMES = (RECONCILES, RECONCILE_TIME, QUEUE_DEPTH, QUEUE_ADDS, QUEUE_RETRIES, QUEUE_WAIT, API_REQUESTS,
         EVENTS, EVENTS_DROPPED, WRITES, WRITE_ATTEMPTS, REACHABLE, UNREACHABLE, LAST_CONTACT, LAST_SYNC,
         UNSERVED, LOCALITY, UNLABELED_NODES, CREDENTIAL_EXPIRES, CREDENTIAL_ISSUED, LEADER, READY,
         FILE_REFUSED, WRITER_CONFLICTS)


_VALIDITY: weakref.WeakKeyDictionary[Client, Validity | None] = weakref.WeakKeyDictionary()


def _validity(c: Client) -> Validity | None:
    """The client's credential's validity, read once per client (a changed kubeconfig is a new one)."""
    if c not in _VALIDITY:
        _VALIDITY[c] = of_identity(c.transport.cfg.identity)
    return _VALIDITY[c]


def publish_credential(name: str, c: Client | None, put: Put) -> None:
    """When the member's credential expires and was issued, where it says."""
    v = _validity(c) if c is not None else None
    if v is not None:
        put(CREDENTIAL_EXPIRES, v.expires, member=name)
        if v.issued is not None:
            put(CREDENTIAL_ISSUED, v.issued, member=name)


def publish_queue(mgr: Manager, put: Put) -> None:
    """The work queue's depth, adds, retries and its wait and work histograms."""
    depth, adds, retries, waited, worked = mgr.queue.figures()
    put(QUEUE_DEPTH, depth)
    for name, n in sorted(mgr.queue.depths().items()):
        put(MEMBER_QUEUE_DEPTH, n, member=name)
    put(QUEUE_ADDS, adds)
    put(QUEUE_RETRIES, retries)
    put_histogram(put, QUEUE_WAIT, BOUNDS, waited.buckets, waited.total)
    put_histogram(put, RECONCILE_TIME, BOUNDS, worked.buckets, worked.total)


def publish_counts(counts: dict[tuple[str, ...], int], name: str, put: Put) -> None:
    """A member's counters (`carry.Carry.counts`): writes tried and landed, API requests, probes
    that found it unreachable."""
    for k, n in sorted(counts.items()):
        if k[0] == "attempt":
            put(WRITE_ATTEMPTS, n, member=name, resource=k[1], verb=k[2])
        elif k[0] == "landed":
            put(WRITES, n, member=name, resource=k[1], verb=k[2])
        elif k[0] == "api":
            put(API_REQUESTS, n, member=name, method=k[1], code=k[2])
    put(UNREACHABLE, counts.get(("unreachable",), 0), member=name)


def publish(mgr: Manager, put: Put, carry: Carry | None = None) -> None:
    """The controller's samples, read from `mgr` now (the members' counters through `carry`)."""
    carry = carry if carry is not None else Carry()
    for result in ("ok", "retry", "error"):
        put(RECONCILES, mgr.results[result], result=result)
    publish_queue(mgr, put)
    with mgr.rec.unserved_lock:
        per_member = [u for by_member in mgr.rec.unserved.values() for u in by_member.items()]
    for mc in mgr.caches:
        m = mc.member
        publish_counts(carry.counts(mc), m.name, put)
        put(REACHABLE, 1.0 if mc.reachable else 0.0, member=m.name)
        if mc.last_ok is not None:
            put(LAST_CONTACT, time.time() - (mgr.clock() - mc.last_ok), member=m.name)
        put(LAST_SYNC, mc.last_sync, member=m.name)
        if mgr.rec.writers is not None:
            put(WRITER_CONFLICTS, mgr.rec.writers.conflicts(m.name), member=m.name)
        put(UNSERVED, sum(len(ports) for name, ports in per_member if name == m.name), member=m.name)
        publish_credential(m.name, m.client, put)
    if mgr.rec.events is not None:
        written, dropped = mgr.rec.events.figures()
        for (member, typ, reason), n in sorted(written.items()):
            put(EVENTS, n, member=member, type=typ, reason=reason)
        for mc in mgr.caches:
            for why in ("rate", "queue", "error"):
                put(EVENTS_DROPPED, dropped.get((mc.member.name, why), 0), member=mc.member.name, why=why)
    for (member, reason, service), n in sorted(ENDPOINT_SLICES.verdicts.degraded().items()):
        put(LOCALITY, n, member=member, reason=reason, service=service)
    for mc in mgr.caches:
        z = mc.zones()
        if z is not None and z.error is None:
            put(UNLABELED_NODES, len(z.unlabeled), member=mc.member.name)
    put(LEADER, 1.0 if mgr.leading() else 0.0)
    put(READY, 1.0 if mgr.ready.is_set() else 0.0)


def publish_refused(refused: dict[str, str], put: Put) -> None:
    """The member files refused (member -> field; Membership.refused)."""
    for member, fld in sorted(dict(refused).items()):
        put(FILE_REFUSED, 1.0, member=member, field=fld)


def registry(mgr: Manager, refused: dict[str, str] | None = None) -> CollectorRegistry:
    """The controller's series, then mcsdns_build_info and process_* (mcsdns.ops.process)."""
    reg = CollectorRegistry(auto_describe=False)
    stats = Stats()
    stats.register(partial(publish, mgr, carry=Carry()))
    stats.register(partial(publish_refused, refused if refused is not None else {}))
    stats.register(process.publish)
    reg.register(SnapshotCollector(stats.snapshot, NAMES + process.NAMES))
    return reg


def render(reg: CollectorRegistry) -> bytes:
    return generate_latest(reg)
