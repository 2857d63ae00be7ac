"""Ask the test API server (tests/fakeapi/) and a real kube-apiserver the same questions and
print where their answers differ (docs/testing.md lists the differences and what was done).

    MCSDNS_REALK8S=/path/to/realk8s.sh .venv/bin/python tests/support/realk8s_probe.py [--all]

Each probe reduces both answers to a few facts (status codes, which fields are set, counts);
only the facts that differ are printed, unless --all. Exit status 1 if any differ.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.error import HTTPError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, run as a script

from fakeapi import KubeAPI  # noqa: E402

from support.realk8s import SKIP_REASON, RealK8s, script  # noqa: E402

Answer = tuple[int, dict[str, str], bytes]
Send = Callable[..., Answer]
MCS = "/apis/multicluster.x-k8s.io/v1beta1"
EPS = "/apis/discovery.k8s.io/v1"


def fake_send(api: KubeAPI) -> Send:
    """The request function of a test API server (same signature as RealK8s.request)."""
    def send(method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
             timeout: float = 30) -> Answer:
        data = json.dumps(body).encode() if body is not None else None
        h = {"Accept": "application/json", **({"Content-Type": "application/json"} if data else {}),
             **(headers or {})}
        req = urllib.request.Request(api.url + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, dict(r.headers.items()), r.read()
        except HTTPError as e:
            return e.code, dict(e.headers.items()), e.read()
    return send


def js(a: Answer) -> Any:
    try:
        return json.loads(a[2])
    except ValueError:
        return None


def events(a: Answer) -> list[tuple[str, Any]]:
    """A watch answer's (type, object) events."""
    out = []
    for line in a[2].splitlines():
        if line.strip():
            ev = json.loads(line)
            out.append((ev["type"], ev["object"]))
    return out


def ns(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def si(name: str, spec_ports: int = 80) -> dict[str, Any]:
    return {"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
            "metadata": {"name": name, "labels": {"app": "x"}},
            "spec": {"type": "ClusterSetIP", "ports": [{"port": spec_ports, "protocol": "TCP"}]}}


def slice_(name: str, n: int = 1, ports: int = 1) -> dict[str, Any]:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
            "metadata": {"name": name, "labels": {"kubernetes.io/service-name": "db"}},
            "endpoints": [{"addresses": [f"10.1.{i // 250}.{i % 250 + 1}"]} for i in range(n)],
            "ports": [{"name": f"p{i}", "port": 1000 + i, "protocol": "TCP"} for i in range(ports)]}


def meta_keys(o: Any) -> list[str]:
    return sorted((o or {}).get("metadata", {}))


def err(a: Answer) -> str:
    body = js(a) or {}
    return f"{a[0]} {body.get('reason', '')}: {str(body.get('message', ''))[:160]}"


# ---- probes: each takes `send` and a namespace of its own, returns {fact: value} -----------

def p_crd_metadata(send: Send, n: str) -> dict[str, Any]:
    a = send("POST", f"{MCS}/namespaces/{n}/serviceimports", si("db"))
    o = js(a)
    mf = o["metadata"].get("managedFields") or []
    return {"create status": a[0], "metadata keys": meta_keys(o),
            "generation": o["metadata"].get("generation"),
            "managedFields[0] keys": sorted(mf[0]) if mf else None,
            "managedFields manager/operation": [(m.get("manager"), m.get("operation")) for m in mf],
            "status on create": o.get("status")}


def p_crd_generation(send: Send, n: str) -> dict[str, Any]:
    o = js(send("POST", f"{MCS}/namespaces/{n}/serviceimports", si("g")))
    path = f"{MCS}/namespaces/{n}/serviceimports/g"
    out: dict[str, Any] = {}
    o["metadata"]["labels"] = {"app": "y"}
    o = js(send("PUT", path, o))
    out["labels changed: generation"] = o["metadata"]["generation"]
    o["spec"]["ports"][0]["port"] = 81
    o["status"] = {"clusters": [{"cluster": "a"}]}
    o = js(send("PUT", path, o))
    out["spec+status by PUT: generation, status kept"] = (o["metadata"]["generation"], o.get("status"))
    o["spec"]["ports"][0]["port"] = 82
    o["status"] = {"clusters": [{"cluster": "b"}]}
    o["metadata"]["labels"] = {"app": "z"}
    s = js(send("PUT", path + "/status", o))
    out["PUT /status: generation, port, status, labels"] = (
        s["metadata"]["generation"], s["spec"]["ports"][0]["port"], s.get("status"), s["metadata"]["labels"])
    out["managers after /status"] = sorted({(m["manager"], m["operation"], m.get("subresource", ""))
                                            for m in s["metadata"].get("managedFields") or []})
    return out


def p_service(send: Send, n: str) -> dict[str, Any]:
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
           "spec": {"ports": [{"port": 80}]}}
    o = js(send("POST", f"/api/v1/namespaces/{n}/services", svc))
    hl = dict(svc, metadata={"name": "hl"}, spec={"clusterIP": "None", "ports": [{"port": 80}]})
    h = js(send("POST", f"/api/v1/namespaces/{n}/services", hl))
    bad = send("POST", f"/api/v1/namespaces/{n}/services", dict(svc, metadata={"name": "Bad_Name"}))
    sp = o["spec"]
    return {"spec keys": sorted(sp), "port keys": sorted(sp["ports"][0]), "status": o.get("status"),
            "ipFamilies/policy": (sp.get("ipFamilies"), sp.get("ipFamilyPolicy")),
            "headless ipFamilies/policy": (h["spec"].get("ipFamilies"), h["spec"].get("ipFamilyPolicy")),
            "generation": o["metadata"].get("generation"), "metadata keys": meta_keys(o),
            "bad name": err(bad), "namespace a.b": err(send("POST", "/api/v1/namespaces", ns("a.b")))}


def p_endpointslice(send: Send, n: str) -> dict[str, Any]:
    path = f"{EPS}/namespaces/{n}/endpointslices"
    o = js(send("POST", path, slice_("s")))
    gen1 = o["metadata"].get("generation")
    o["endpoints"].append({"addresses": ["10.9.9.9"]})
    o2 = js(send("PUT", f"{path}/s", o))
    o2["metadata"]["labels"]["x"] = "y"
    o3 = js(send("PUT", f"{path}/s", o2))
    return {"metadata keys": meta_keys(o), "generation create/endpoints/labels":
            (gen1, o2["metadata"].get("generation"), o3["metadata"].get("generation")),
            "1001 endpoints": err(send("POST", path, slice_("big", n=1001))),
            "1000 endpoints": send("POST", path, slice_("ok", n=1000))[0],
            "101 ports": err(send("POST", path, slice_("ports", ports=101))),
            "no addressType": err(send("POST", path, {k: v for k, v in slice_("na").items()
                                                      if k != "addressType"})),
            "long label value": err(send("POST", path, dict(slice_("ll"), metadata={
                "name": "ll", "labels": {"a": "x" * 64}})))}


def _fill(send: Send, n: str, k: int) -> None:
    for i in range(k):
        send("POST", f"{MCS}/namespaces/{n}/serviceimports", si(f"s{i}"))


def p_lists(send: Send, n: str) -> dict[str, Any]:
    _fill(send, n, 5)
    base = f"{MCS}/namespaces/{n}/serviceimports"
    out: dict[str, Any] = {}
    for q in ("limit=2&resourceVersion=0", "limit=2",
              "limit=2&resourceVersion=0&resourceVersionMatch=NotOlderThan"):
        d = js(send("GET", f"{base}?{q}"))
        out[f"list {q}: items, continue?, remaining"] = (
            len(d["items"]), bool(d["metadata"].get("continue")), d["metadata"].get("remainingItemCount"))
    d = js(send("GET", f"{base}?limit=2"))
    rest = js(send("GET", f"{base}?limit=2&continue={d['metadata']['continue']}"))
    out["second page items"] = len(rest["items"])
    out["bad continue"] = err(send("GET", f"{base}?limit=2&continue=garbage"))
    out["Exact at rv 1"] = err(send("GET", f"{base}?resourceVersion=1&resourceVersionMatch=Exact"))
    out["list item kind/apiVersion"] = (d["items"][0].get("kind"), d["items"][0].get("apiVersion"))
    named = js(send("GET", f"{base}?fieldSelector=metadata.name%3Ds1"))
    out["fieldSelector metadata.name"] = len(named["items"])
    out["fieldSelector spec.type on CRD"] = err(send("GET", f"{base}?fieldSelector=spec.type%3Dx"))
    out["fieldSelector spec.type on Services"] = send(
        "GET", "/api/v1/services?fieldSelector=spec.type%3DClusterIP")[0]
    out["fieldSelector addressType on EndpointSlices"] = err(send(
        "GET", f"{EPS}/endpointslices?fieldSelector=addressType%3DIPv4"))
    return out


def p_watch(send: Send, n: str) -> dict[str, Any]:
    _fill(send, n, 3)
    base = f"{MCS}/namespaces/{n}/serviceimports"
    out: dict[str, Any] = {}
    for rv in ("0", ""):
        evs = events(send("GET", f"{base}?watch=1&timeoutSeconds=1&resourceVersion={rv}"))
        out[f"watch rv={rv!r}: event types"] = [f"{t} {o.get('message')}" if t == "ERROR" else t
                                                 for t, o in evs]
    a = send("GET", f"{base}?watch=1&timeoutSeconds=1&resourceVersion=1")
    out["watch rv=1 (too old)"] = (a[0], [(t, o.get("code"), o.get("reason")) for t, o in events(a)]
                                   if a[0] == 200 else err(a))
    q = ("watch=1&timeoutSeconds=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
         "&allowWatchBookmarks=true")
    evs = events(send("GET", f"{base}?{q}"))
    out["streaming list: types"] = [t for t, _ in evs]
    out["streaming list: bookmark"] = [o for t, o in evs if t == "BOOKMARK"][:1]
    out["streaming list: error"] = [(o.get("code"), o.get("reason"), o.get("message"))
                                    for t, o in evs if t == "ERROR"]
    evs = events(send("GET", f"{base}?watch=1&timeoutSeconds=1&allowWatchBookmarks=true&resourceVersion=0"))
    out["watch rv=0 with bookmarks: types"] = [t for t, _ in evs]
    rv = js(send("GET", base))["metadata"]["resourceVersion"]
    a = send("GET", f"{base}?watch=1&timeoutSeconds=4&allowWatchBookmarks=true&resourceVersion={rv}")
    out["bookmarks in a 4 s watch from the list's rv"] = [(t, o) for t, o in events(a) if t == "BOOKMARK"][:1]
    out["watch without sendInitialEvents, NotOlderThan"] = err(send(
        "GET", f"{base}?watch=1&timeoutSeconds=1&resourceVersionMatch=NotOlderThan"))
    return out


def p_content(send: Send, n: str) -> dict[str, Any]:
    send("POST", f"{EPS}/namespaces/{n}/endpointslices", slice_("c"))
    pb = "application/vnd.kubernetes.protobuf"
    out: dict[str, Any] = {}
    for what, path in (("EndpointSlice", f"{EPS}/namespaces/{n}/endpointslices"),
                       ("ServiceImport", f"{MCS}/namespaces/{n}/serviceimports")):
        for accept in (pb, f"{pb}, application/json"):
            a = send("GET", path, headers={"Accept": accept})
            out[f"{what} Accept {accept}"] = (a[0], a[1].get("Content-Type"))
    meta = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
    a = send("GET", f"{EPS}/namespaces/{n}/endpointslices", headers={"Accept": meta})
    out["metadata-only list"] = (a[0], (js(a) or {}).get("kind"))
    return out


def p_sizes(send: Send, n: str) -> dict[str, Any]:
    """Bytes of one object in a list answer (what a client reads and decodes)."""
    send("POST", f"{MCS}/namespaces/{n}/serviceimports", si("db"))
    send("POST", f"{EPS}/namespaces/{n}/endpointslices", slice_("db-1", n=10))
    send("POST", f"/api/v1/namespaces/{n}/services", {"apiVersion": "v1", "kind": "Service", "metadata": {
        "name": "db", "labels": {"app": "db"}}, "spec": {"selector": {"app": "db"}, "ports": [{"port": 80}]}})
    out = {}
    for what, path in (("ServiceImport", f"{MCS}/namespaces/{n}/serviceimports"),
                       ("EndpointSlice (10 endpoints)", f"{EPS}/namespaces/{n}/endpointslices"),
                       ("Service", f"/api/v1/namespaces/{n}/services")):
        (item,) = js(send("GET", path))["items"]
        out[f"{what}: bytes, managedFields bytes"] = (
            len(json.dumps(item, separators=(",", ":"))),
            len(json.dumps(item["metadata"].get("managedFields"), separators=(",", ":"))))
    return out


PROBES = [p_sizes, p_crd_metadata, p_crd_generation, p_service, p_endpointslice, p_lists, p_watch, p_content]


def run(send: Send, tag: str) -> dict[str, dict[str, Any]]:
    out = {}
    for i, p in enumerate(PROBES):
        n = f"probe-{tag}-{i}"
        send("POST", "/api/v1/namespaces", ns(n))
        try:
            out[p.__name__] = p(send, n)
        except Exception as e:  # noqa: BLE001 - a probe that breaks is a difference too
            out[p.__name__] = {"probe failed": f"{type(e).__name__}: {e}"}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--all", action="store_true", help="print the facts that agree too")
    args = ap.parse_args()
    if script() is None:
        print(SKIP_REASON)
        return 2
    with KubeAPI() as api, RealK8s.up("mcsdns-probe") as real:
        fake_out, real_out = run(fake_send(api), "f"), run(real.request, "r")
    differ = 0
    for probe, facts in real_out.items():
        for fact in sorted(set(facts) | set(fake_out.get(probe, {}))):
            r, f = facts.get(fact), fake_out.get(probe, {}).get(fact)
            same = json.dumps(r, default=str) == json.dumps(f, default=str)
            differ += not same
            if args.all or not same:
                print(f"{'  ' if same else '≠ '}{probe}: {fact}\n    real: {r}\n    fake: {f}")
    print(f"{differ} differences")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
