"""deploy/ as the tests read it: the kustomize overlays rendered (as kubectl kustomize does),
the objects and pod specs in them, the RBAC rules an identity is granted and a request needs,
and each member cluster as the controller Deployment reaches it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import yaml
from fakeapi import KubeAPI

from support.helpers import REPO

# --- rendering ------------------------------------------------------------------------------------
Obj = dict[str, Any]
DEPLOY = REPO / "deploy"
VARIANTS = {"default": DEPLOY, "with-controller": DEPLOY / "overlays" / "with-controller",
            "per-cluster": DEPLOY / "overlays" / "per-cluster"}
K8S_VERSION = "1.30.0"
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}
KUSTOMIZE_FIELDS = {"apiVersion", "kind", "resources", "namespace", "patches"}
MCS = "multicluster.x-k8s.io"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
SLICE_MANAGER = "endpointslice.kubernetes.io/managed-by"
Grant = tuple[str | None, Obj]  # (namespace the rule is limited to, or None; the rule)


def render(directory: Path) -> list[Obj]:
    """The subset of kustomize these manifests use: `resources` (files, or directories with a
    kustomization.yaml), `namespace` for namespaced objects and `patches` (a JSON 6902 file's
    `replace` ops on the object its target names by kind and name). Any other field fails."""
    kust = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unsupported = set(kust) - KUSTOMIZE_FIELDS
    assert not unsupported, f"{directory}: the renderer does not support {unsupported}"
    out: list[Obj] = []
    for res in kust.get("resources", []):
        path = (directory / res).resolve()
        out += render(path) if path.is_dir() else [d for d in yaml.safe_load_all(path.read_text()) if d]
    ns = kust.get("namespace")
    for o in out:
        if ns and o["kind"] not in CLUSTER_SCOPED:
            o["metadata"]["namespace"] = ns
    for p in kust.get("patches", []):
        t = p["target"]
        obj = next(o for o in out if o["kind"] == t["kind"] and o["metadata"]["name"] == t["name"])
        for op in yaml.safe_load((directory / p["path"]).read_text()):
            assert op["op"] == "replace", op
            *parents, last = [int(x) if x.isdigit() else x for x in op["path"].strip("/").split("/")]
            at: Any = obj
            for x in parents:
                at = at[x]
            at[last] = op["value"]
    return out


def by_kind(objs: list[Obj], kind: str) -> list[Obj]:
    return [o for o in objs if o["kind"] == kind]


def named(objs: list[Obj], kind: str, name: str) -> Obj:
    return next(o for o in by_kind(objs, kind) if o["metadata"]["name"] == name)


def pod(dep: Obj) -> Obj:
    spec: Obj = dep["spec"]["template"]["spec"]
    return spec


# --- an RBAC authorizer for the requests tests/fakeapi/ logged ----------------------------------
@dataclass(frozen=True)
class Attrs:
    """The RBAC attributes of one API request."""

    verb: str
    group: str
    resource: str  # "plural" or "plural/subresource"
    namespace: str | None


def attributes(method: str, url: str) -> Attrs | None:
    """Request attributes as kube-apiserver derives them; None for discovery (non-resource URLs)."""
    u = urlparse(url)
    parts = [p for p in u.path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) > 3:
        group, rest = parts[1], parts[3:]
    else:
        return None
    if not rest:
        return None
    ns = None
    if rest[0] == "namespaces" and len(rest) > 2:
        ns, rest = rest[1], rest[2:]
    resource = "/".join([rest[0], *rest[2:3]])
    named_ = len(rest) > 1
    if method == "GET":
        watch = parse_qs(u.query).get("watch", [""])[-1] in ("1", "true")
        verb = "watch" if watch else ("get" if named_ else "list")
    elif method == "DELETE":
        verb = "delete" if named_ else "deletecollection"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}[method]
    return Attrs(verb, group, resource, ns)


def grants(objs: list[Obj], namespace: str, account: str) -> list[Grant]:
    """The rules bound to ServiceAccount namespace/account by the rendered (Cluster)RoleBindings."""
    def bound(b: Obj) -> bool:
        return any(s["kind"] == "ServiceAccount" and s["name"] == account and s.get("namespace") == namespace
                   for s in b.get("subjects", []))

    out: list[Grant] = []
    for b in by_kind(objs, "ClusterRoleBinding"):
        if bound(b):
            out += [(None, r) for r in named(objs, "ClusterRole", b["roleRef"]["name"])["rules"]]
    for b in by_kind(objs, "RoleBinding"):
        if bound(b):
            ref, ns = b["roleRef"], b["metadata"]["namespace"]
            role = (named(objs, "ClusterRole", ref["name"]) if ref["kind"] == "ClusterRole"
                    else next(r for r in by_kind(objs, "Role")
                              if r["metadata"]["name"] == ref["name"] and r["metadata"]["namespace"] == ns))
            out += [(ns, r) for r in role["rules"]]
    return out


def allowed(gs: list[Grant], a: Attrs) -> bool:
    def has(values: list[str], v: str) -> bool:
        return v in values or "*" in values

    return any((ns is None or ns == a.namespace) and has(r["apiGroups"], a.group)
               and has(r["resources"], a.resource) and has(r["verbs"], a.verb) and not r.get("resourceNames")
               for ns, r in gs)


def requested(api: KubeAPI) -> set[Attrs]:
    return {a for m, u in list(api.requests) if (a := attributes(m, u))}


def cluster_args(args: list[str]) -> list[tuple[str, str]]:
    """(name, kubeconfig path) of each --cluster, then member "west" as a key of --members-dir."""
    out = [tuple(a.split("=", 2)[1:]) for a in args if a.startswith("--cluster=")]
    out += [("west", a.split("=", 1)[1] + "/west") for a in args if a.startswith("--members-dir=")]
    return out  # type: ignore[return-value]


def mounted(spec: Obj, path: str) -> tuple[Obj, str]:
    """The volume a file path in the container lies in, and the file's key in it."""
    mounts = spec["containers"][0]["volumeMounts"]
    m = next(m for m in mounts if path.startswith(m["mountPath"].rstrip("/") + "/"))
    vol = next(v for v in spec["volumes"] if v["name"] == m["name"])
    return vol, path[len(m["mountPath"].rstrip("/")) + 1:]


def ready_service(ns: str, name: str) -> list[Obj]:
    """A Service with one ready endpoint, as the cluster's own controllers would have written it."""
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
             "spec": {"type": "ClusterIP", "sessionAffinity": "None",
                      "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}},
            {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
             "metadata": {"name": f"{name}-x1", "namespace": ns,
                          "labels": {"kubernetes.io/service-name": name,
                                     SLICE_MANAGER: "endpointslice-controller.k8s.io"}},
             "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
             "endpoints": [{"addresses": ["10.1.0.5"], "conditions": {"ready": True}}]}]


def member_flags(objs: list[Obj], dep: Obj, members: list[tuple[str, str]], apis: list[KubeAPI],
             tmp_path: Path, member_role: str = "mcsdns-controller") -> tuple[list[str], list[list[Grant]]]:
    """Each member cluster (ids east, west) as the Deployment reaches it: its --cluster flag
    (the in-cluster kubeconfig from the ConfigMap with a fake ServiceAccount dir, or a member
    kubeconfig as from the Secret, bound to ClusterRole `member_role`) and the rules that
    identity is bound to."""
    spec = pod(dep)
    sa_dir = tmp_path / "sa"
    sa_dir.mkdir()
    (sa_dir / "token").write_text("test-token")
    (sa_dir / "ca.crt").write_text("not used over plain HTTP\n")
    flags: list[str] = []
    perms: list[list[Grant]] = []
    for (name, path), api, cid in zip(members, apis, ["east", "west"], strict=True):
        vol, key = mounted(spec, path)
        kubeconfig = tmp_path / f"{name}.kubeconfig"
        if "configMap" in vol:
            text = named(objs, "ConfigMap", vol["configMap"]["name"])["data"][key]
            assert SA_DIR in text and "https://kubernetes.default.svc" in text
            kubeconfig.write_text(text.replace(SA_DIR, str(sa_dir))
                                  .replace("https://kubernetes.default.svc", api.url))
            perms.append(grants(objs, dep["metadata"]["namespace"], spec["serviceAccountName"]))
        else:  # a key of the members Secret: `mcsdns join` binds ClusterRole mcsdns-controller
            (tmp_path / "members").mkdir()
            api.write_kubeconfig(tmp_path / "members" / key, name)
            perms.append([(None, r) for r in named(objs, "ClusterRole", member_role)["rules"]])
            kubeconfig = tmp_path / "members"
        is_dir = kubeconfig.is_dir()
        flags += ["--members-dir", str(kubeconfig)] if is_dir else ["--cluster", f"{name}={kubeconfig}"]
        api.put({"apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
                 "metadata": {"name": "cluster.clusterset.k8s.io"}, "spec": {"value": cid}})
    return flags, perms
