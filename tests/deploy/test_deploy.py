"""deploy/ checked without a cluster or a container engine (the Containerfile and the CoreDNS
snippets: test_image_snippets.py).

The kustomizations are rendered (a small renderer for the subset they use, cross-checked
with `kubectl kustomize` where kubectl exists), every object is validated against the
Kubernetes 1.30 OpenAPI schemas (kubernetes-validate, offline), the pods' hardening and
wiring is asserted, and the RBAC rules are proven sufficient by running `mcsdns serve` and
`mcsdns controller` with the Deployments' own arguments against tests/fakeapi/ and
authorizing every API request they made against the rendered Roles, as the RBAC authorizer
would.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import kubernetes_validate  # the `test` extra; bundles the schemas, works offline
import pytest
import yaml
from fakeapi import KubeAPI
from support.controller_env import eventually, run_controller
from support.deploy_env import (
    CLUSTER_SCOPED,
    DEPLOY,
    K8S_VERSION,
    MCS,
    SLICE_MANAGER,
    VARIANTS,
    Attrs,
    Obj,
    allowed,
    by_kind,
    cluster_args,
    grants,
    member_flags,
    mounted,
    named,
    pod,
    ready_service,
    render,
    requested,
)
from support.helpers import EXAMPLE, run_server, tool

from mcsdns.cli import build_parser
from mcsdns.kube import permissions
from mcsdns.ops import tsigkeys
from mcsdns.sources.manifest import load_file
from mcsdns.transport.listeners import HANDOFF


# --- schemas --------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_object_is_valid_against_the_kubernetes_schemas(variant: str) -> None:
    objs = render(VARIANTS[variant])
    assert len(objs) >= (17 if variant == "with-controller" else 10)
    for o in objs:
        kubernetes_validate.validate(o, K8S_VERSION, strict=True)


def test_schema_validation_rejects_a_broken_object() -> None:
    dep = named(render(VARIANTS["default"]), "Deployment", "mcsdns")
    pod(dep)["containers"][0]["ports"][0]["containerPort"] = "5353"  # a string, not an integer
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(dep, K8S_VERSION, strict=True)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_renderer_agrees_with_kubectl_kustomize(variant: str) -> None:
    out = subprocess.run([tool("kubectl"), "kustomize", str(VARIANTS[variant])],
                         capture_output=True, text=True, check=True).stdout

    def key(o: Obj) -> tuple[str, str, str]:
        return o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]

    want = sorted((o for o in yaml.safe_load_all(out) if o), key=key)
    assert sorted(render(VARIANTS[variant]), key=key) == want


# SHA-256 of the upstream files: mcs-api v0.5.0's config/crd (ServiceImport, ServiceExport) and
# about-api's ClusterProperty CRD with its kustomize patch applied
UPSTREAM_CRDS = {
    "about.k8s.io_clusterproperties.yaml":
        "2e3148fa42ea2faf8328e4115edd80a987ecd8f915c7a0c2c7ccabbd291a04c4",
    "multicluster.x-k8s.io_serviceexports.yaml":
        "1ec6ffc8094c8f67434431737b9c1d5132e686f21577250a615ed1e30da67097",
    "multicluster.x-k8s.io_serviceimports.yaml":
        "dfec64055b7a5dd47013706c26706ef20f7ae3319b0ae594f6353585cc052ec4",
}


def test_crds_are_the_upstream_ones_unmodified() -> None:
    files = {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in (DEPLOY / "crds").glob("*.yaml")
             if f.name != "kustomization.yaml"}
    assert files == UPSTREAM_CRDS
    names = {o["spec"]["names"]["kind"] for o in render(DEPLOY / "crds")}
    assert names == {"ServiceImport", "ServiceExport", "ClusterProperty"}


# --- least privilege ------------------------------------------------------------------------------
@pytest.mark.parametrize("variant,role,rules", [
    ("default", "mcsdns-server", permissions.SERVER),
    ("with-controller", "mcsdns-controller", permissions.CONTROLLER)])
def test_clusterroles_grant_what_diagnose_checks(variant: str, role: str,
                                                 rules: tuple[permissions.Rule, ...]) -> None:
    """`mcsdns diagnose` checks the permissions in mcsdns.kube.permissions: the deployed
    ClusterRoles grant exactly those."""
    granted = {(g, r, v) for rule in named(render(VARIANTS[variant]), "ClusterRole", role)["rules"]
               for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    assert granted == {(g, r, v) for g, r, verbs in rules for v in verbs}


def test_the_lease_role_is_the_permission_list() -> None:
    objs = render(VARIANTS["with-controller"])
    role = named(objs, "Role", "mcsdns-controller-lease")
    assert role["rules"] == permissions.policy_rules(permissions.CONTROLLER_LEASES)


def test_server_clusterrole_reads_three_resources_and_nothing_else() -> None:
    objs = render(VARIANTS["default"])
    role = named(objs, "ClusterRole", "mcsdns-server")
    resources = {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert resources == {(MCS, "serviceimports"), ("discovery.k8s.io", "endpointslices"),
                         ("about.k8s.io", "clusterproperties")}
    assert {v for rule in role["rules"] for v in rule["verbs"]} <= {"get", "list", "watch"}
    sa = pod(named(objs, "Deployment", "mcsdns"))["serviceAccountName"]
    gs = grants(objs, "mcsdns-system", sa)
    assert {id(r) for _, r in gs} == {id(r) for r in role["rules"]}  # bound, and nothing else is
    assert not allowed(gs, Attrs("update", MCS, "serviceimports", "shop"))
    assert not allowed(gs, Attrs("list", "", "secrets", None))


def test_server_rbac_allows_every_request_mcsdns_serve_makes(tmp_path: Path) -> None:
    """`mcsdns serve` with the Deployment's arguments against a test API server holding the
    example clusterset: it syncs and answers, and every API request it made is authorized."""
    objs = render(VARIANTS["default"])
    dep = named(objs, "Deployment", "mcsdns")
    args = pod(dep)["containers"][0]["args"]
    assert args[0] == "serve"
    kept = [a for a in args[1:] if not a.startswith(("--listen", "--health", "--metrics"))]
    # the state directory (an emptyDir in the pod) is a temporary directory here
    kept = [f"--state-dir={tmp_path / 'state'}" if a.startswith("--state-dir") else a for a in kept]
    example = [o for p in sorted(EXAMPLE.glob("*.yaml")) for o in load_file(p)]
    web = next(o for o in example if o["kind"] == "ServiceImport" and o["spec"].get("ips"))
    with KubeAPI() as api:
        for o in example:
            api.put(o)
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        with run_server([*kept, "--kubeconfig", str(kubeconfig)], tmp_path) as srv:
            md = web["metadata"]
            r = srv.query(f"{md['name']}.{md['namespace']}.svc.clusterset.local", "A")
            v4 = sorted(ip for ip in web["spec"]["ips"] if ":" not in ip)
            assert v4 and sorted(str(rd) for rr in r.answer for rd in rr) == v4
        reqs = requested(api)
    assert Attrs("watch", MCS, "serviceimports", None) in reqs
    assert Attrs("list", "discovery.k8s.io", "endpointslices", None) in reqs
    gs = grants(objs, dep["metadata"]["namespace"], pod(dep)["serviceAccountName"])
    assert sorted(map(str, (a for a in reqs if not allowed(gs, a)))) == []


def test_controller_members_are_mounted_and_the_lease_is_where_its_role_is() -> None:
    objs = render(VARIANTS["with-controller"])
    dep = named(objs, "Deployment", "mcsdns-controller")
    spec, args = pod(dep), pod(dep)["containers"][0]["args"]
    members = cluster_args(args)
    assert len(members) >= 2 and len({n for n, _ in members}) == len(members)
    kinds = []
    for _, path in members:
        vol, key = mounted(spec, path)
        if "configMap" in vol:
            cm = named(objs, "ConfigMap", vol["configMap"]["name"])
            assert key in cm["data"] and cm["metadata"]["namespace"] == dep["metadata"]["namespace"]
            kinds.append("configMap")
        else:
            assert "secret" in vol and "/" not in key
            kinds.append("secret")
    assert kinds[0] == "configMap"  # the first member is this cluster, through the pod's ServiceAccount
    lease_ns = next(a.split("=", 1)[1] for a in args if a.startswith("--lease-namespace="))
    lease_cluster = next(a.split("=", 1)[1] for a in args if a.startswith("--lease-cluster="))
    assert lease_cluster == members[0][0] and "--leader-elect" in args
    gs = grants(objs, dep["metadata"]["namespace"], spec["serviceAccountName"])
    for verb in ("get", "create", "update"):
        assert allowed(gs, Attrs(verb, "coordination.k8s.io", "leases", lease_ns))
        assert not allowed(gs, Attrs(verb, "coordination.k8s.io", "leases", "kube-system"))
    assert not allowed(gs, Attrs("get", "", "secrets", lease_ns))


def _stale_import(ns: str, name: str, cluster: str) -> list[Obj]:
    """What the controller left behind for a service no longer exported anywhere."""
    return [{"apiVersion": f"{MCS}/v1beta1", "kind": "ServiceImport",
             "metadata": {"name": name, "namespace": ns,
                          "labels": {"app.kubernetes.io/managed-by": "mcsdns-controller"}},
             "spec": {"type": "ClusterSetIP", "ips": ["242.0.0.99"],
                      "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}},
            {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
             "metadata": {"name": f"{name}-{cluster}-x", "namespace": ns,
                          "labels": {SLICE_MANAGER: "mcsdns-controller",
                                     "multicluster.kubernetes.io/service-name": name,
                                     "multicluster.kubernetes.io/source-cluster": cluster}},
             "addressType": "IPv4", "endpoints": [{"addresses": ["10.9.0.1"]}]}]


@pytest.fixture
def apis() -> Iterator[list[KubeAPI]]:
    with ExitStack() as stack:
        yield [stack.enter_context(KubeAPI()) for _ in range(2)]


def test_controller_rbac_allows_every_request_mcsdns_controller_makes(apis: list[KubeAPI],
                                                                      tmp_path: Path) -> None:
    """The controller with the Deployment's arguments and volumes (the in-cluster kubeconfig from
    the ConfigMap, a member kubeconfig from the Secret) exports a service, imports it, removes a
    stale import and takes the Lease; every request it made in each cluster is authorized by what
    that identity is bound to: the ServiceAccount's bindings here, the ClusterRole in the member."""
    objs = render(VARIANTS["with-controller"])
    dep = named(objs, "Deployment", "mcsdns-controller")
    args = pod(dep)["containers"][0]["args"]
    members = cluster_args(args)[:2]
    assert args[0] == "controller"
    kept = [a for a in args[1:] if not a.startswith(("--cluster=", "--members-dir=", "--health"))]
    cluster_flags, perms = member_flags(objs, dep, members, apis, tmp_path)
    kept += cluster_flags
    local, member = apis
    for o in ready_service("shop", "web") + [{"apiVersion": f"{MCS}/v1beta1", "kind": "ServiceExport",
                                         "metadata": {"name": "web", "namespace": "shop"}}]:
        local.put(o)
    for o in ready_service("shop", "other")[:1] + _stale_import("shop", "gone", "east"):
        member.put(o)
    lease_ns = next(a.split("=", 1)[1] for a in args if a.startswith("--lease-namespace="))
    with run_controller(kept, tmp_path) as ctl:
        si = eventually(lambda: (lambda s: s if s and s["spec"].get("ips") else None)(
            member.get("ServiceImport", "shop", "web")),
            what=f"ServiceImport with its ClusterSetIP in the member\n{ctl.logs()}")
        eventually(lambda: member.get("ServiceImport", "shop", "gone") is None,
                   what="stale import removed")
        eventually(lambda: not [s for s in member.objects("EndpointSlice")
                                if s["metadata"]["name"].startswith("gone-")], what="stale slice removed")
        eventually(lambda: any(c["type"] == "Ready" and c["status"] == "True" for c in
                               ((local.get("ServiceExport", "shop", "web") or {}).get("status") or {})
                               .get("conditions", [])), what="export Ready")
        lease = local.get("Lease", lease_ns, "mcsdns-controller")
        assert lease and lease["spec"]["holderIdentity"]
    # derived mode: the ClusterSetIP is the ClusterIP of the derived Service in the member
    derived = [s for s in member.objects("Service") if s["metadata"]["name"].startswith("derived-")]
    assert len(derived) == 1 and si["spec"]["ips"] == derived[0]["spec"]["clusterIPs"]
    assert any(lease["metadata"]["name"] == "mcsdns-member-west" for lease in local.objects("Lease"))
    for api, gs in zip(apis, perms, strict=True):
        reqs = requested(api)
        assert any(a.verb == "create" for a in reqs) and any(a.verb == "watch" for a in reqs)
        assert sorted(map(str, (a for a in reqs if not allowed(gs, a)))) == []
    deletes = {a.resource for a in requested(member) if a.verb == "delete"}
    assert deletes == {"serviceimports", "endpointslices"}
    assert Attrs("update", MCS, "serviceexports/status", "shop") in requested(local)


# --- pods and services ----------------------------------------------------------------------------
def test_pods_are_hardened_and_probed() -> None:
    objs = render(VARIANTS["with-controller"])
    deps = by_kind(objs, "Deployment")
    assert {d["metadata"]["name"] for d in deps} == {"mcsdns", "mcsdns-controller"}
    for dep in deps:
        spec = pod(dep)
        assert dep["spec"]["replicas"] == 2
        psc = spec["securityContext"]
        assert psc["runAsNonRoot"] is True and psc["runAsUser"] == 65532
        assert psc["seccompProfile"]["type"] == "RuntimeDefault"
        anti = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
        assert anti["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
        selector = dep["spec"]["selector"]["matchLabels"]
        assert anti["podAffinityTerm"]["labelSelector"]["matchLabels"] == selector
        assert selector.items() <= dep["spec"]["template"]["metadata"]["labels"].items()
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"] and "add" not in sc["capabilities"]
            ports = {p["name"]: p for p in c["ports"]}
            for probe, path in (("livenessProbe", "/health"), ("readinessProbe", "/ready")):
                assert c[probe]["httpGet"]["path"] == path and c[probe]["httpGet"]["port"] in ports
            assert set(c["resources"]["requests"]) == set(c["resources"]["limits"]) == {"cpu", "memory"}
            assert all(p["containerPort"] >= 1024 for p in c["ports"])
            # the kubernetes client writes inline kubeconfig credentials to temp files
            tmp = next(m for m in c["volumeMounts"] if m["mountPath"] == "/tmp")
            assert "emptyDir" in next(v for v in spec["volumes"] if v["name"] == tmp["name"])


def test_deployment_args_are_accepted_by_the_cli() -> None:
    objs = render(VARIANTS["with-controller"])
    for dep in by_kind(objs, "Deployment"):
        c = pod(dep)["containers"][0]
        ns = build_parser().parse_args(c["args"])  # SystemExit on an unknown flag
        health = {p["name"]: p["containerPort"] for p in c["ports"]}["health"]
        assert ns.health[1] == health
    server = pod(named(objs, "Deployment", "mcsdns"))["containers"][0]
    ns = build_parser().parse_args(server["args"])
    ports = {p["name"]: p for p in server["ports"]}
    assert ns.listen == [("0.0.0.0", 5353)] and ns.metrics == ("0.0.0.0", 9153)
    assert (ports["dns"]["containerPort"], ports["dns"]["protocol"]) == (5353, "UDP")
    assert (ports["dns-tcp"]["containerPort"], ports["dns-tcp"]["protocol"]) == (5353, "TCP")
    assert ports["metrics"]["containerPort"] == 9153
    assert ns.kubeconfig is None and ns.manifests is None  # in-cluster config


def test_server_grace_period_covers_lameduck_and_drain() -> None:
    """The kubelet's SIGKILL comes after --lameduck, the hand-over and the TCP drain."""
    spec = pod(named(render(DEPLOY), "Deployment", "mcsdns"))
    ns = build_parser().parse_args(spec["containers"][0]["args"])
    assert ns.lameduck > 0
    assert spec["terminationGracePeriodSeconds"] > ns.lameduck + HANDOFF + ns.tcp_read_timeout + 5


def test_server_tsig_keys_come_from_an_optional_secret_not_the_command_line() -> None:
    server = pod(named(render(DEPLOY), "Deployment", "mcsdns"))["containers"][0]
    ns = build_parser().parse_args(server["args"])
    assert ns.tsig_key == [] and ns.tsig_key_file == []  # else $MCSDNS_TSIG_KEY is ignored
    env = {e["name"]: e for e in server["env"]}
    ref = env[tsigkeys.ENV]["valueFrom"]["secretKeyRef"]
    assert ref["optional"] is True and ref["name"] and ref["key"]


def test_server_state_dir_is_an_emptydir_volume() -> None:
    """--state-dir lives on an emptyDir: it survives a container restart inside the pod."""
    spec = pod(named(render(VARIANTS["default"]), "Deployment", "mcsdns"))
    c = spec["containers"][0]
    state_dir = build_parser().parse_args(c["args"]).state_dir
    assert state_dir
    mount = next(m for m in c["volumeMounts"] if m["mountPath"] == state_dir)
    assert not mount.get("readOnly")
    assert "emptyDir" in next(v for v in spec["volumes"] if v["name"] == mount["name"])


def test_service_maps_53_udp_and_tcp_to_the_pods() -> None:
    objs = render(VARIANTS["default"])
    dep = named(objs, "Deployment", "mcsdns")
    cports = {p["name"]: p for p in pod(dep)["containers"][0]["ports"]}
    labels = dep["spec"]["template"]["metadata"]["labels"]
    svc = named(objs, "Service", "mcsdns")
    assert svc["spec"]["type"] == "ClusterIP" and svc["spec"]["selector"].items() <= labels.items()
    got = {(p["port"], p["protocol"], cports[p["targetPort"]]["containerPort"],
            cports[p["targetPort"]]["protocol"]) for p in svc["spec"]["ports"]}
    assert got == {(53, "UDP", 5353, "UDP"), (53, "TCP", 5353, "TCP"), (9153, "TCP", 9153, "TCP")}
    pdb = named(objs, "PodDisruptionBudget", "mcsdns")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert all(o["metadata"].get("namespace", "mcsdns-system") == "mcsdns-system" for o in objs
               if o["kind"] not in CLUSTER_SCOPED)
