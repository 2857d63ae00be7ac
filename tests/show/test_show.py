"""`mcsdns show` against three test API servers synced by the real controller: what is exported
and imported where, the ClusterSetIPs each member got, the export conflicts, and each
member's reachability, as a table and as JSON (test_real_show: on real kube-apiservers)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.controller_env import Cluster, shop
from support.diagnose_env import installed, members_dir, sync3
from support.helpers import REPO


def show(*args: str) -> tuple[int, str]:
    out = subprocess.run([sys.executable, "-m", "mcsdns", "show", *args], capture_output=True, text=True,
                         timeout=60, cwd=REPO)
    assert out.returncode in (0, 1), out.stderr
    return out.returncode, out.stdout


def every(cs: list[Cluster]) -> list[str]:
    return [f"--cluster={c.name}={c.kubeconfig}" for c in cs]


@pytest.fixture
def synced(clusters3: list[Cluster]) -> Iterator[list[Cluster]]:
    """a exports web (80/TCP) and db (headless); c exports web on port 81: a port conflict."""
    a, b, c = clusters3
    shop(a, clusters3)
    installed(*clusters3)
    c.kube.service("shop", "web", ports=(("http", 81, "TCP"),))
    c.kube.endpoints("shop", "web", "web-c", [("10.3.0.5", None)])
    c.kube.export("shop", "web")
    sync3(clusters3)
    yield clusters3


def test_json_says_what_is_exported_and_imported_where(synced: list[Cluster]) -> None:
    a, b, c = synced
    rc, out = show(*every(synced), "--json")
    inv: dict[str, Any] = json.loads(out)
    svc = {f"{s['namespace']}/{s['name']}": s for s in inv["services"]}
    assert rc == 0 and set(svc) == {"shop/web", "shop/db"}
    web, db = svc["shop/web"], svc["shop/db"]
    assert (web["type"], web["exported_by"]) == ("ClusterSetIP", ["a", "c"])
    assert web["imported_in"] == ["a", "b", "c"]
    for cl in synced:
        assert web["ips"][cl.name] == cl.kube.imported("shop", "web")["spec"]["ips"]
    assert {x["member"] for x in web["conflicts"]} == {"a", "c"}
    assert all(x["message"].startswith("Conflict=True (PortConflict)") for x in web["conflicts"])
    assert (db["type"], db["exported_by"], db["conflicts"]) == ("Headless", ["a"], [])
    members = {m["name"]: m for m in inv["members"]}
    assert [members[n]["cluster_id"] for n in "abc"] == ["east", "west", "north"]
    assert all(m["reachable"] and m["state"] == "ready" for m in members.values())
    assert [members[n]["exports"] for n in "abc"] == [2, 0, 1]


def test_table_and_an_unreachable_member(synced: list[Cluster]) -> None:
    a, b, c = synced
    b.stop()
    rc, out = show(*every(synced))
    lines = out.splitlines()
    assert rc == 0 and lines[0].split() == ["SERVICE", "TYPE", "EXPORTED", "BY", "IMPORTED", "IN",
                                            "CLUSTERSET", "IPS", "CONFLICTS", "LOCALITY"]
    web = next(line for line in lines if line.startswith("shop/web "))
    ip_a = a.kube.imported("shop", "web")["spec"]["ips"][0]
    assert "ClusterSetIP  a, c " in web and f"a={ip_a}" in web
    assert "Conflict=True (PortConflict) in a, c" in web
    row = {line.split()[0]: line for line in lines[lines.index("") + 1:]}
    assert row["a"].split()[1] == "east" and "ready (v1.31.0-kubeapi)" in row["a"]
    assert row["b"].split()[1] == "-" and "Connection refused" in row["b"], row["b"]


def test_from_the_members_directory(synced: list[Cluster], tmp_path: Path) -> None:
    a, b, c = synced
    rc, out = show("--kubeconfig", str(a.kubeconfig), "--members-dir", str(members_dir(tmp_path, b, c)),
                   "--output", "json")
    inv = json.loads(out)
    assert [m["name"] for m in inv["members"]] == ["local", "b", "c"]
    assert [s["exported_by"] for s in inv["services"]] == [["local"], ["local", "c"]]
