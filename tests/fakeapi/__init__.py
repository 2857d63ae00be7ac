"""The fake Kubernetes API server: in memory, over HTTP, for tests and benchmarks. It is not
kube-apiserver: no etcd, no admission, no protobuf, any token taken (RBAC as below). Where the two
differ, the real kube-apiserver is right: a difference a test depends on is a bug here, and
the ones left are listed in docs/testing.md (checked against a real one by
tests/support/realk8s_probe.py and tests/kube/test_real_parity.py).

It speaks enough of the real API for the official `kubernetes` client,
`kubectl get/apply` of plain objects and `mcsdns`: one process-local object
store per instance, one global resourceVersion counter, plain HTTP
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
- `/readyz` (always ready); discovery: `/version`, `/api`, `/api/v1`, `/apis`, `/apis/G`, `/apis/G/V`
  (APIResourceList with `<plural>` and `<plural>/status`). `KubeAPI(groups={G: (V, ...)})`
  overrides the versions served for a group (first = preferred; `()` = group absent).
  `register(Resource(...))` adds any resource type; defaults are in `RESOURCES`.
- list `GET .../<plural>` (namespaced `/namespaces/NS/<plural>` or all namespaces):
  `labelSelector` (`k`, `!k`, `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`),
  `fieldSelector` (`metadata.name`, `metadata.namespace`, a kind's own such as a Service's
  `spec.type`; `=`, `==`, `!=`), `limit`/`continue` paging over a consistent snapshot (an
  evicted token is 410 Expired, an undecodable one 400), metadata-only lists (`Accept:
  application/json;as=PartialObjectMetadataList;...`; `as=PartialObjectMetadata` is 406 for a
  list, and makes a watch's objects metadata only); no protobuf (a request accepting only
  protobuf is 406), `resourceVersion` (`0`: served as from the watch cache, the whole list in
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
  Streaming lists (`sendInitialEvents=true`, and bookmarks from resourceVersion unset/0) are
  refused with an ERROR event as by a real server on etcd 3.4, unless `watch_list` is set:
  then ADDED events and a BOOKMARK annotated `k8s.io/initial-events-end`.
  The window keeps the last `window` events; `compact()` drops them all now.
- writes: POST (create; 409 AlreadyExists), PUT (replace; 409 on a stale
  `metadata.resourceVersion`), PATCH (merge patch; a JSON list body is a JSON patch with
  add/replace/remove; a Content-Type that is no patch type is 415, as is a strategic merge
  patch of a custom resource), DELETE, and the `/status` subresource (PUT/PATCH change only
  `status`; the main resource ignores `status` changes). uid, creationTimestamp,
  generation (per kind: custom resources, EndpointSlices) and managedFields (fields)
  are set as the real API does; writes are validated (valid: names, labels,
  EndpointSlice limits, with the real 422 messages), except `put()`.
- Services get ClusterIPs as kube-apiserver allocates them (`ClusterIPs`: from
  `service_cidrs`, dual-stack per `ipFamilyPolicy`/`ipFamilies`, immutable, headless `None`
  kept, released on delete; headless without a selector: RequireDualStack) and the API's
  defaults (type, sessionAffinity, internalTrafficPolicy, port protocol and targetPort,
  `status.loadBalancer`).
- faults: `stop()`/`start()`, `drop_watches()` (close every open watch),
  `fail_next(n, status, reason, message)` (the next n requests get that error, with a
  `Status` body), `requests` (log of (method, path?query) served).
- TokenRequests (`POST .../serviceaccounts/NAME/token`, tokens): a token per request,
  its lifetime checked as the real server checks it; `tokens.issued` lists them.
- RBAC (rbac): requests without an issued token are the admin's, refused only where
  `deny(plural, verbs)` says (kube-apiserver's 403 `Status`, its message naming `user`, verb,
  resource, group and namespace; `allow()` lifts every denial); a TokenRequest token is its
  ServiceAccount's, authorized by the stored ClusterRoles/Roles bound to it (401 once it
  expired or the ServiceAccount is gone).
- timing: `emitted[rv]` is the `time.perf_counter()` when an event with that
  resourceVersion was first written to a watch stream (for latency benchmarks).

`KubeAPI` (server) composes the parts, one module each: resources (resource types,
discovery, paths), store (objects, resourceVersions, the event window), lists, watch, rbac,
ipam (ClusterIPs), select (selectors, patches), status (error bodies), fields (managedFields),
valid (validation, content types, watch options), tokens (TokenRequests) and http (the HTTP
handler and open connections). Beside them: hostile (a KubeAPI with hostile answers on demand)
and credential (JWTs and kubeconfigs carrying them).
"""

from .server import KubeAPI

__all__ = ["KubeAPI"]
