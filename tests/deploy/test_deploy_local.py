"""deploy/overlays/per-cluster: the controller of the per-cluster topology (`--local`), checked
as tests/deploy/test_deploy.py checks the central one: its arguments are the CLI's, its reader
ClusterRole is mcsdns.kube.permissions.READER, and run with the Deployment's own arguments
against two test API servers it imports the other member's export while every request it makes
there is authorized by the reader role alone (no write)."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

from fakeapi import KubeAPI
from support.controller_env import eventually, run_controller
from support.deploy_env import (
    MCS,
    VARIANTS,
    Attrs,
    allowed,
    cluster_args,
    grants,
    member_flags,
    named,
    pod,
    ready_service,
    render,
    requested,
)

from mcsdns.cli import build_parser
from mcsdns.kube import permissions

VARIANT = "per-cluster"


def _args() -> list[str]:
    dep = named(render(VARIANTS[VARIANT]), "Deployment", "mcsdns-controller")
    args: list[str] = pod(dep)["containers"][0]["args"]
    return args


def test_the_reader_clusterrole_is_the_permission_list_and_reads_only() -> None:
    role = named(render(VARIANTS[VARIANT]), "ClusterRole", "mcsdns-reader")
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}
    assert granted == {(g, r, v) for g, r, verbs in permissions.READER for v in verbs}
    assert {v for _, _, v in granted} <= {"get", "list", "watch"}


def test_the_local_controller_writes_here_and_leads_here() -> None:
    args = _args()
    ns = build_parser().parse_args(args)  # SystemExit on an unknown flag
    members = cluster_args(args)
    assert ns.local == members[0][0] and ns.leader_elect and ns.lease_cluster in ("", ns.local)
    assert ns.clusterset_ip == "derived" and ns.members_dir
    central = pod(named(render(VARIANTS["with-controller"]), "Deployment", "mcsdns-controller"))
    assert [a for a in central["containers"][0]["args"] if not a.startswith("--lease-cluster")] == \
        [a for a in args if a != f"--local={ns.local}"]  # the central Deployment's, but --local


def test_the_local_controller_only_reads_the_other_member(tmp_path: Path) -> None:
    objs = render(VARIANTS[VARIANT])
    dep = named(objs, "Deployment", "mcsdns-controller")
    args = _args()
    kept = [a for a in args[1:] if not a.startswith(("--cluster=", "--members-dir=", "--health"))]
    with ExitStack() as stack:
        apis = [stack.enter_context(KubeAPI()) for _ in range(2)]
        flags, perms = member_flags(objs, dep, cluster_args(args)[:2], apis, tmp_path, "mcsdns-reader")
        local, member = apis
        local.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}})
        for o in ready_service("shop", "web") + [{"apiVersion": f"{MCS}/v1beta1", "kind": "ServiceExport",
                                             "metadata": {"name": "web", "namespace": "shop"}}]:
            member.put(o)
        with run_controller([*kept, *flags], tmp_path) as ctl:
            eventually(lambda: (local.get("ServiceImport", "shop", "web") or {}).get("spec", {}).get("ips"),
                       what=f"the member's export imported here\n{ctl.logs()}")
        gs = grants(objs, dep["metadata"]["namespace"], pod(dep)["serviceAccountName"])
        for api, g in ((local, gs), (member, perms[1])):
            assert sorted(map(str, (a for a in requested(api) if not allowed(g, a)))) == []
        reads = requested(member)
        assert not [a for a in reads if a.verb not in ("get", "list", "watch")]
        assert {a.resource for a in reads if a.verb == "watch"} == {"services", "endpointslices",
                                                                    "serviceexports"}
        assert Attrs("update", MCS, "serviceexports/status", "shop") not in reads
        assert member.get("ServiceImport", "shop", "web") is None
