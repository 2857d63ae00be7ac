"""The member token against a REAL kube-apiserver (MCSDNS_REALK8S; skipped without it), which
enforces ValidatingAdmissionPolicies: RBAC alone (join --no-admission-policy, or join before
the policy) lets the token write any Service, EndpointSlice, ServiceImport or Event in any
namespace, kube-system included; with the policy join installs, only the controller's own
objects, and a real controller run through the token still imports a service. The matrix of
both is printed (pytest -s) for the record."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.controller_env import eventually
from support.helpers import LIVENESS, REPO
from support.realk8s import RealK8s

from mcsdns.controller.kinds.derivedservice import derived_name
from mcsdns.kube.apiclient.client import Client
from mcsdns.kube.apiclient.errors import ApiError, NotFound

MCS = "/apis/multicluster.x-k8s.io/v1beta1"
SLICES = "/apis/discovery.k8s.io/v1"
VAP = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/mcsdns-member"
OURS = {"app.kubernetes.io/managed-by": "mcsdns-controller"}
OUR_SLICE = "endpointslice.kubernetes.io/managed-by"
Obj = dict[str, Any]


def mcsdns(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mcsdns", *args], capture_output=True, text=True,
                          timeout=180, cwd=REPO)


def endpoint_slice(name: str, labels: dict[str, str], ns: str) -> Obj:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "addressType": "IPv4", "endpoints": [{"addresses": ["10.9.9.9"]}],
            "ports": [{"port": 8080, "protocol": "TCP"}]}


class Attempts:
    """Writes made with the member token in kube-system, each named by what it tries."""

    def __init__(self, k8s: RealK8s, member: Client) -> None:
        self.k8s, self.member = k8s, member
        self.tag = uuid.uuid4().hex[:6]
        self.victim = f"victim-{self.tag}"  # someone else's Service, with its EndpointSlice
        k8s.json("POST", "/api/v1/namespaces/kube-system/services", {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": self.victim},
            "spec": {"selector": {"app": "v"}, "ports": [{"port": 80, "protocol": "TCP"}]}})
        k8s.json("POST", f"{SLICES}/namespaces/kube-system/endpointslices", self.slice(
            f"{self.victim}-a", {"kubernetes.io/service-name": self.victim}))
        self.derived = derived_name(("kube-system", f"web-{self.tag}"))

    def slice(self, name: str, labels: dict[str, str]) -> Obj:
        return endpoint_slice(name, labels, "kube-system")

    def service(self, name: str, labels: dict[str, str], **spec: Any) -> Obj:
        return {"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": name, "namespace": "kube-system", "labels": labels},
                "spec": {"ports": [{"port": 80, "protocol": "TCP"}], **spec}}

    def _put(self, path: str, change: Callable[[Obj], None]) -> None:
        obj = self.k8s.json("GET", path)
        change(obj)
        self.member.request("PUT", path, obj)

    def forbidden(self) -> dict[str, Callable[[], Any]]:
        """What the controller never does."""
        svc, sl = "/api/v1/namespaces/kube-system/services", f"{SLICES}/namespaces/kube-system/endpointslices"
        ev = "/api/v1/namespaces/kube-system/events"
        t = self.tag

        def relabel(o: Obj) -> None:
            o["metadata"].setdefault("labels", {})["x"] = t

        def take(o: Obj) -> None:
            o["metadata"].setdefault("labels", {}).update(OURS)

        def extra(o: Obj) -> None:
            o["endpoints"].append({"addresses": ["10.6.6.6"]})

        return {
            "update an unlabelled Service in kube-system": lambda: self._put(f"{svc}/{self.victim}", relabel),
            "label an unlabelled Service as ours (take it over)": lambda: self._put(
                f"{svc}/{self.victim}", take),
            "delete an unlabelled Service in kube-system": lambda: self.member.request(
                "DELETE", f"{svc}/{self.victim}-gone"),
            "create a labelled LoadBalancer Service selecting kube-dns": lambda: self.member.request(
                "POST", svc, self.service(f"lb-{t}", OURS, type="LoadBalancer",
                                          selector={"k8s-app": "kube-dns"})),
            "create a labelled derived-named Service with externalIPs": lambda: self.member.request(
                "POST", svc, self.service(derived_name(("x", t)), OURS, externalIPs=["192.0.2.1"])),
            "add a labelled EndpointSlice to someone else's Service": lambda: self.member.request(
                "POST", sl, self.slice(f"{self.victim}-b", {"kubernetes.io/service-name": self.victim,
                                                            OUR_SLICE: "mcsdns-controller"})),
            "add an endpoint to someone else's EndpointSlice": lambda: self._put(
                f"{sl}/{self.victim}-a", extra),
            "create an unlabelled EndpointSlice": lambda: self.member.request(
                "POST", sl, self.slice(f"free-{t}", {})),
            "create an unlabelled ServiceImport": lambda: self.member.request(
                "POST", f"{MCS}/namespaces/kube-system/serviceimports", self.service_import(f"si-{t}", {})),
            "create an Event about a Pod": lambda: self.member.request(
                "POST", ev, self.event(f"pod-{t}", "Pod")),
            "create an Event about a Lease not a member's": lambda: self.member.request(
                "POST", ev, self.event(f"lease-{t}", "Lease", "kube-controller-manager")),
        }

    def service_import(self, name: str, labels: dict[str, str]) -> Obj:
        return {"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
                "metadata": {"name": name, "namespace": "kube-system", "labels": labels},
                "spec": {"type": "ClusterSetIP", "ports": [{"port": 80, "protocol": "TCP"}]}}

    def event(self, name: str, kind: str, about: str = "x") -> Obj:
        return {"apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": "kube-system"},
                "involvedObject": {"kind": kind, "name": about, "namespace": "kube-system"},
                "reason": "Test", "message": "test", "type": "Normal"}

    def controllers(self) -> dict[str, Callable[[], Any]]:
        """What the controller does (in order: create, update, delete)."""
        svc, sl = "/api/v1/namespaces/kube-system/services", f"{SLICES}/namespaces/kube-system/endpointslices"
        si = f"{MCS}/namespaces/kube-system/serviceimports"
        t, d = self.tag, self.derived
        ours_slice = {OUR_SLICE: "mcsdns-controller", "kubernetes.io/service-name": d}

        def ports(o: Obj) -> None:
            o["spec"]["ports"][0]["port"] = 81

        def status(o: Obj) -> None:
            o["status"] = {"clusters": [{"cluster": "east"}]}

        return {
            "create a derived Service": lambda: self.member.request("POST", svc, self.service(d, OURS)),
            "update the derived Service": lambda: self._put(f"{svc}/{d}", ports),
            "create an imported EndpointSlice for it": lambda: self.member.request(
                "POST", sl, self.slice(f"{d}-{t}", ours_slice)),
            "create a ServiceImport": lambda: self.member.request(
                "POST", si, self.service_import(f"web-{t}", OURS)),
            "update the ServiceImport's status": lambda: self._put(f"{si}/web-{t}/status", status),
            "create an Event about a ServiceExport": lambda: self.member.request(
                "POST", "/api/v1/namespaces/kube-system/events", self.event(f"se-{t}", "ServiceExport")),
            "create an Event about a member's Lease": lambda: self.member.request(
                "POST", "/api/v1/namespaces/kube-system/events",
                self.event(f"ml-{t}", "Lease", "mcsdns-member-west")),
            "delete the imported EndpointSlice": lambda: self.member.request("DELETE", f"{sl}/{d}-{t}"),
            "delete the derived Service": lambda: self.member.request("DELETE", f"{svc}/{d}"),
            "delete the ServiceImport": lambda: self.member.request("DELETE", f"{si}/web-{t}"),
        }


def outcome(attempt: Callable[[], Any]) -> str:
    try:
        attempt()
    except NotFound:
        return "not found"
    except ApiError as e:
        denied = "ValidatingAdmissionPolicy 'mcsdns-member'" in (e.body or "")
        return "DENIED by the policy" if denied else f"{e.status}"
    return "allowed"


def matrix(a: Attempts) -> dict[str, str]:
    """Each attempt's outcome; what is made for the `delete` attempt is made first (as the admin)."""
    a.k8s.json("POST", "/api/v1/namespaces/kube-system/services", a.service(f"{a.victim}-gone", {}))
    out = {what: outcome(f) for what, f in {**a.forbidden(), **a.controllers()}.items()}
    print(f"\n{'-' * 100}")
    for what, got in out.items():
        print(f"{got:<22} {what}")
    return out


@pytest.fixture
def joined(real_k8s: RealK8s, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A namespace of its own for join's ServiceAccount (leave cannot wait for a namespace to go:
    this control plane runs no namespace controller); left afterwards."""
    ns = f"mcsdns-adm-{uuid.uuid4().hex[:6]}"
    yield ns, tmp_path / "member.kubeconfig"
    out = mcsdns("leave", "a", "--kubeconfig", str(real_k8s.kubeconfig), "--namespace", ns)
    assert out.returncode == 0, out.stderr


def join(k8s: RealK8s, ns: str, kubeconfig: Path, *extra: str) -> Client:
    out = mcsdns("join", "a", "--kubeconfig", str(k8s.kubeconfig), "--namespace", ns, "--output",
                 str(kubeconfig), *extra)
    assert out.returncode == 0, out.stderr
    return Client.load(str(kubeconfig), None, name="member")


def test_rbac_alone_lets_the_member_token_write_anything_of_its_kinds(
        real_k8s: RealK8s, joined: tuple[str, Path]) -> None:
    """The hole the policy closes (and what join made before it): every attempt succeeds."""
    ns, kubeconfig = joined
    real_k8s.request("DELETE", VAP)
    member = join(real_k8s, ns, kubeconfig, "--no-admission-policy")
    assert real_k8s.request("GET", VAP)[0] == 404
    got = matrix(Attempts(real_k8s, member))
    assert set(got.values()) == {"allowed"}, got


def test_the_policy_limits_the_member_token_to_the_controllers_own_objects(
        real_k8s: RealK8s, joined: tuple[str, Path]) -> None:
    ns, kubeconfig = joined
    member = join(real_k8s, ns, kubeconfig)
    a = Attempts(real_k8s, member)
    # the API server's policy cache catches up with a new policy (none: the matrix says so)
    probe = a.forbidden()["create an Event about a Pod"]
    deadline = time.monotonic() + LIVENESS
    while outcome(probe) != "DENIED by the policy" and time.monotonic() < deadline:
        time.sleep(0.2)
    got = matrix(a)
    assert {w: got[w] for w in a.forbidden()} == {w: "DENIED by the policy" for w in a.forbidden()}
    assert {w: got[w] for w in a.controllers()} == {w: "allowed" for w in a.controllers()}
    victim = real_k8s.json("GET", f"/api/v1/namespaces/kube-system/services/{a.victim}")
    assert not victim["metadata"].get("labels") and victim["spec"]["type"] == "ClusterIP"
    assert len(real_k8s.json("GET", f"{SLICES}/namespaces/kube-system/endpointslices/{a.victim}-a")
               ["endpoints"]) == 1
    out = mcsdns("leave", "a", "--kubeconfig", str(real_k8s.kubeconfig), "--namespace", ns)
    assert out.returncode == 0, out.stderr
    assert "validatingadmissionpolicy mcsdns-member: deleted" in out.stderr, out.stderr
    assert real_k8s.request("GET", VAP)[0] == 404


def test_a_controller_run_through_the_guarded_token_still_imports(
        real_k8s: RealK8s, joined: tuple[str, Path]) -> None:
    """One member exporting to itself: a ServiceImport, the derived Service with its ClusterIP,
    the imported EndpointSlice, the ServiceExport's status and Events, all written through the
    token the policy guards, none refused."""
    ns, kubeconfig = joined
    join(real_k8s, ns, kubeconfig)
    prop = "/apis/about.k8s.io/v1alpha1/clusterproperties"
    real_k8s.request("DELETE", f"{prop}/cluster.clusterset.k8s.io")
    real_k8s.json("POST", prop, {"apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
                                 "metadata": {"name": "cluster.clusterset.k8s.io"},
                                 "spec": {"value": "east"}})
    shop = real_k8s.namespace("shop")
    real_k8s.json("POST", f"/api/v1/namespaces/{shop}/services", {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}})
    real_k8s.json("POST", f"{SLICES}/namespaces/{shop}/endpointslices",
                  endpoint_slice("web-x", {"kubernetes.io/service-name": "web"}, shop))
    real_k8s.json("POST", f"{MCS}/namespaces/{shop}/serviceexports", {
        "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport", "metadata": {"name": "web"}})
    eventually(lambda: real_k8s.request("GET", VAP)[0] == 200, what="the policy")
    run = mcsdns("controller", "--once", "--cluster", f"m={kubeconfig}")
    assert run.returncode == 0, run.stderr
    assert "ValidatingAdmissionPolicy" not in run.stderr and " 422 " not in run.stderr, run.stderr
    si = real_k8s.json("GET", f"{MCS}/namespaces/{shop}/serviceimports/web")
    assert si["spec"]["ips"] and si["status"]["clusters"] == [{"cluster": "east"}], si
    derived = real_k8s.json("GET", f"/api/v1/namespaces/{shop}/services/{derived_name((shop, 'web'))}")
    assert derived["spec"]["clusterIP"] == si["spec"]["ips"][0]
    ours = real_k8s.json("GET", f"{SLICES}/namespaces/{shop}/endpointslices?labelSelector={OUR_SLICE}"
                                "%3Dmcsdns-controller")["items"]
    assert [e["addresses"] for s in ours for e in s["endpoints"]] == [["10.9.9.9"]]
    conds = {c["type"]: c["status"] for c in real_k8s.json(
        "GET", f"{MCS}/namespaces/{shop}/serviceexports/web")["status"]["conditions"]}
    assert conds.get("Ready") == "True", conds
    real_k8s.unexport(shop)  # the session's control plane: no objects of this writer left for the next
