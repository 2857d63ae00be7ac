"""A minimal in-memory Kubernetes API server (fallback while tests/kubeapi.py does not exist).

Enough for the controller: group discovery, list (label selectors: a=b, a!=b, a), watch
(resourceVersion), create/replace/delete, status subresource, uid, creationTimestamp, generation.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import yaml

RESOURCES = {  # plural -> (group, versions, kind, namespaced)
    "namespaces": ("", ("v1",), "Namespace", False),
    "services": ("", ("v1",), "Service", True),
    "endpointslices": ("discovery.k8s.io", ("v1",), "EndpointSlice", True),
    "serviceexports": ("multicluster.x-k8s.io", ("v1beta1", "v1alpha1"), "ServiceExport", True),
    "serviceimports": ("multicluster.x-k8s.io", ("v1beta1", "v1alpha1"), "ServiceImport", True),
    "clusterproperties": ("about.k8s.io", ("v1beta1", "v1alpha1"), "ClusterProperty", False),
    "leases": ("coordination.k8s.io", ("v1",), "Lease", True),
}
PATH = re.compile(r"^/(?:api/(?P<cv>v1)|apis/(?P<g>[^/]+)/(?P<v>[^/]+))"
                  r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?(?P<status>/status)?$")


def _match(labels: dict[str, str], selector: str) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k) == v:
                return False
        elif "=" in term:
            k, v = term.split("=", 1)
            if labels.get(k) != v.lstrip("="):
                return False
        elif term not in labels:
            return False
    return True


class MiniKube:
    def __init__(self, mcs_versions: tuple[str, ...] = ("v1beta1", "v1alpha1")) -> None:
        self.mcs_versions = mcs_versions
        self.objs: dict[tuple[str, str, str], dict[str, Any]] = {}  # (plural, ns, name)
        self.events: list[tuple[int, str, str, dict[str, Any]]] = []  # (rv, plural, type, obj)
        self.rv = 0
        self.cond = threading.Condition()
        self.writes = 0
        self.httpd: ThreadingHTTPServer | None = None
        self.port = 0

    def _versions(self, group: str, versions: tuple[str, ...]) -> tuple[str, ...]:
        return self.mcs_versions if group == "multicluster.x-k8s.io" else versions

    # --- storage -------------------------------------------------------------------
    def _bump(self, plural: str, typ: str, obj: dict[str, Any]) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.events.append((self.rv, plural, typ, json.loads(json.dumps(obj))))
        self.cond.notify_all()

    def handle(self, method: str, url: str, body: Any) -> tuple[int, Any]:
        u = urlparse(url)
        q = {k: v[0] for k, v in parse_qs(u.query).items()}
        if u.path.rstrip("/") in ("/api", "/apis"):
            return 200, {"kind": "APIVersions", "versions": ["v1"]}
        parts = u.path.strip("/").split("/")
        if len(parts) == 2 and parts[0] == "apis":
            vs = sorted({v for g, vv, _, _ in RESOURCES.values() if g == parts[1]
                         for v in self._versions(g, vv)}, reverse=True)
            if not vs:
                return 404, {"kind": "Status", "code": 404}
            return 200, {"kind": "APIGroup", "name": parts[1],
                         "versions": [{"groupVersion": f"{parts[1]}/{v}", "version": v} for v in vs]}
        m = PATH.match(u.path)
        if not m or m["plural"] not in RESOURCES:
            return 404, {"kind": "Status", "code": 404, "message": u.path}
        group, versions, kind, _ = RESOURCES[m["plural"]]
        if (m["g"] or "") != group or (m["cv"] or m["v"]) not in self._versions(group, versions):
            return 404, {"kind": "Status", "code": 404}
        plural, ns, name = m["plural"], m["ns"] or "", m["name"]
        api_version = f"{group}/{m['v']}" if group else "v1"
        with self.cond:
            if method == "GET" and name is None:
                if q.get("watch") == "true":
                    return 200, ("WATCH", plural, ns, int(q.get("resourceVersion") or 0),
                                 float(q.get("timeoutSeconds") or 30), q.get("labelSelector", ""))
                items = [o for (p, n, _), o in sorted(self.objs.items())
                         if p == plural and (not ns or n == ns)
                         and _match(o["metadata"].get("labels") or {}, q.get("labelSelector", ""))]
                return 200, {"kind": kind + "List", "apiVersion": api_version,
                             "metadata": {"resourceVersion": str(self.rv)}, "items": items}
            key = (plural, ns, name or (body or {}).get("metadata", {}).get("name", ""))
            cur = self.objs.get(key)
            if method == "GET":
                return (200, cur) if cur else (404, {"kind": "Status", "code": 404})
            self.writes += 1
            if method == "POST":
                if cur is not None:
                    return 409, {"kind": "Status", "code": 409, "reason": "AlreadyExists"}
                obj = json.loads(json.dumps(body))
                md = obj.setdefault("metadata", {})
                md.update(uid=str(uuid.uuid4()), generation=1,
                          creationTimestamp=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
                if ns:
                    md["namespace"] = ns
                obj["apiVersion"], obj["kind"] = api_version, kind
                self.objs[key] = obj
                self._bump(plural, "ADDED", obj)
                return 201, obj
            if cur is None:
                return 404, {"kind": "Status", "code": 404}
            if method == "DELETE":
                del self.objs[key]
                self._bump(plural, "DELETED", cur)
                return 200, cur
            if method == "PUT":
                rv = (body.get("metadata") or {}).get("resourceVersion")
                if rv and rv != cur["metadata"]["resourceVersion"]:
                    return 409, {"kind": "Status", "code": 409, "reason": "Conflict"}
                obj = json.loads(json.dumps(body))
                if m["status"]:
                    new = dict(cur, status=obj.get("status"))
                else:
                    new = dict(obj, status=cur.get("status")) if "status" in cur else obj
                    if new.get("spec") != cur.get("spec"):
                        cur["metadata"]["generation"] += 1
                new["metadata"] = dict(new["metadata"], uid=cur["metadata"]["uid"],
                                       creationTimestamp=cur["metadata"]["creationTimestamp"],
                                       generation=cur["metadata"]["generation"])
                new["apiVersion"], new["kind"] = api_version, kind
                self.objs[key] = new
                self._bump(plural, "MODIFIED", new)
                return 200, new
        return 405, {"kind": "Status", "code": 405}

    def watch(self, wfile: Any, plural: str, ns: str, rv: int, timeout: float, sel: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.httpd is not None:
            with self.cond:
                evs = [e for e in self.events if e[0] > rv and e[1] == plural]
                if not evs:
                    self.cond.wait(0.5)
                    continue
            for erv, _, typ, obj in evs:
                rv = erv
                if ns and obj["metadata"].get("namespace") != ns:
                    continue
                if not _match(obj["metadata"].get("labels") or {}, sel):
                    continue
                wfile.write(json.dumps({"type": typ, "object": obj}).encode() + b"\n")
                wfile.flush()

    # --- HTTP ----------------------------------------------------------------------
    def start(self, port: int = 0) -> None:
        api = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def _do(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n)) if n else None
                code, out = api.handle(self.command, self.path, body)
                if isinstance(out, tuple) and out[0] == "WATCH":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.close_connection = True
                    try:
                        api.watch(self.wfile, *out[1:])
                    except OSError:
                        pass
                    return
                data = json.dumps(out).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _do

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), H)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    def stop(self) -> None:
        if self.httpd is not None:
            h, self.httpd = self.httpd, None
            with self.cond:
                self.cond.notify_all()
            h.shutdown()
            h.server_close()

    def write_kubeconfig(self, path: Path, name: str = "test") -> Path:
        cfg = {"apiVersion": "v1", "kind": "Config", "current-context": name,
               "clusters": [{"name": name, "cluster": {"server": f"http://127.0.0.1:{self.port}"}}],
               "users": [{"name": name, "user": {"token": "test"}}],
               "contexts": [{"name": name, "context": {"cluster": name, "user": name}}]}
        path.write_text(yaml.safe_dump(cfg))
        return path
