"""deploy/ manifests validated against the Kubernetes OpenAPI schemas, least privilege
checked, and the Containerfile checked statically (no container engine here)."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import REPO

DEPLOY = REPO / "deploy"
K8S_VERSION = "1.30.0"
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}


def render(directory: Path) -> list[dict[str, Any]]:
    """The subset of kustomize these manifests use: resources (files or directories
    with a kustomization.yaml) and a namespace for namespaced objects."""
    kust = yaml.safe_load((directory / "kustomization.yaml").read_text())
    out: list[dict[str, Any]] = []
    for res in kust.get("resources", []):
        path = (directory / res).resolve()
        objs = render(path) if path.is_dir() else [
            d for d in yaml.safe_load_all(path.read_text()) if d]
        out += objs
    ns = kust.get("namespace")
    if ns:
        for o in out:
            if o["kind"] not in CLUSTER_SCOPED:
                o["metadata"]["namespace"] = ns
    return out


def by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


@pytest.mark.parametrize("variant", ["default", "with-controller"])
def test_manifests_are_valid_kubernetes_objects(variant: str) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    objs = render(DEPLOY / variant)
    assert len(objs) >= 10
    for o in objs:
        kubernetes_validate.validate(o, K8S_VERSION, strict=True)


def test_renderer_agrees_with_kubectl_kustomize() -> None:
    if not shutil.which("kubectl"):
        pytest.skip("kubectl not installed")
    out = subprocess.run(["kubectl", "kustomize", str(DEPLOY / "with-controller")],
                         capture_output=True, text=True, check=True).stdout
    want = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"])
            for o in yaml.safe_load_all(out) if o}
    got = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"])
           for o in render(DEPLOY / "with-controller")}
    assert got == want


def test_server_rbac_is_read_only_on_three_resources() -> None:
    objs = render(DEPLOY / "default")
    role = next(o for o in by_kind(objs, "ClusterRole") if o["metadata"]["name"] == "mcsdns-server")
    resources = {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert resources == {("multicluster.x-k8s.io", "serviceimports"),
                         ("discovery.k8s.io", "endpointslices"), ("about.k8s.io", "clusterproperties")}
    assert {v for rule in role["rules"] for v in rule["verbs"]} == {"get", "list", "watch"}
    binding = by_kind(objs, "ClusterRoleBinding")[0]
    assert binding["roleRef"]["name"] == "mcsdns-server"
    assert binding["subjects"][0]["name"] == "mcsdns"


def test_pods_are_hardened_and_probed() -> None:
    objs = render(DEPLOY / "with-controller")
    for dep in by_kind(objs, "Deployment"):
        spec = dep["spec"]["template"]["spec"]
        assert dep["spec"]["replicas"] == 2
        assert spec["securityContext"]["runAsNonRoot"] and spec["securityContext"]["runAsUser"] != 0
        assert spec["affinity"]["podAntiAffinity"]
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"]
            assert sc["capabilities"]["drop"] == ["ALL"]
            assert c["livenessProbe"]["httpGet"]["path"] == "/health"
            assert c["readinessProbe"]["httpGet"]["path"] == "/ready"
            assert c["resources"]["requests"] and c["resources"]["limits"]
            assert all(p["containerPort"] >= 1024 for p in c["ports"])
    server = next(d for d in by_kind(objs, "Deployment") if d["metadata"]["name"] == "mcsdns")
    args = server["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "serve" and "--health=0.0.0.0:8080" in args


def test_server_cli_accepts_the_deployment_args() -> None:
    from mcsdns.cli import build_parser

    objs = render(DEPLOY / "with-controller")
    for dep in by_kind(objs, "Deployment"):
        args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
        build_parser().parse_args(args)  # exits (SystemExit) on an unknown flag


def test_service_exposes_dns_on_udp_and_tcp_53() -> None:
    svc = by_kind(render(DEPLOY / "default"), "Service")[0]
    ports = {(p["port"], p["protocol"]) for p in svc["spec"]["ports"]}
    assert {(53, "UDP"), (53, "TCP")} <= ports
    pdb = by_kind(render(DEPLOY / "default"), "PodDisruptionBudget")[0]
    assert pdb["spec"]["minAvailable"] == 1


def test_containerfile_runs_non_root_on_unprivileged_ports() -> None:
    lines = [ln.strip() for ln in (REPO / "Containerfile").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    user = [ln.split()[1] for ln in lines if ln.startswith("USER ")][-1]
    assert user.split(":")[0] not in ("0", "root")
    exposed = [p for ln in lines if ln.startswith("EXPOSE ") for p in ln.split()[1:]]
    assert all(int(p.split("/")[0]) >= 1024 for p in exposed)
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert 'ENTRYPOINT ["mcsdns"]' in lines and "mcsdns" in scripts
    cmd = next(ln for ln in lines if ln.startswith("CMD "))
    assert "5353" in cmd and '"serve"' in cmd


def test_corefile_snippet_forwards_the_zone() -> None:
    text = (DEPLOY / "coredns" / "Corefile.snippet").read_text()
    assert "clusterset.local:53 {" in text and "forward . MCSDNS_SERVICE_IP" in text
