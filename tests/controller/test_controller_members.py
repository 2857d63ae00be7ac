"""`mcsdns controller --members-dir`: members added, reloaded and removed under a running
controller (one process throughout), the directory laid out as the kubelet mounts a Secret
(`..data` swapped atomically, one symlink per key). The new member is synced; the others get
no write; a removed member's exports go from the others as when it unexports them."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from support.controller_checks import mount
from support.controller_env import Cluster, Controller, eventually, run_controller, shop


def writes(c: Cluster) -> list[tuple[str, str]]:
    """Write requests but Lease renewals."""
    return [(m, p) for m, p in list(c.api.requests) if m in ("POST", "PUT", "PATCH", "DELETE")
            and "/leases" not in p]


def test_member_added_reloaded_and_removed_without_restart(clusters3: list[Cluster], tmp_path: Path) -> None:
    a, b, c = clusters3
    shop(a, clusters3, db=False)  # a exports shop/web; the namespace is in every member
    d = tmp_path / "members"
    cfg = {cl.name: cl.kubeconfig.read_bytes() for cl in clusters3}
    mount(d, {"a": cfg["a"], "b": cfg["b"]})
    with run_controller(["--members-dir", str(d), "--resync", "600"], tmp_path) as ctl:
        eventually(ctl.ready, what="first sync")
        assert b.kube.serviceimport("shop", "web") is not None
        assert c.kube.serviceimport("shop", "web") is None
        pid = ctl.proc.pid
        before = {cl.name: len(writes(cl)) for cl in (a, b)}

        mount(d, {"a": cfg["a"], "b": cfg["b"], "c": cfg["c"]})  # a Secret key added
        eventually(lambda: c.kube.serviceimport("shop", "web"), what="c synced")
        eventually(lambda: c.kube.imported_slices("shop", "web"), what="c's imported slices")
        time.sleep(1.0)
        assert {cl.name: len(writes(cl)) for cl in (a, b)} == before, "adding c wrote to a or b"

        mount(d, {"a": cfg["a"], "b": cfg["b"] + b"\n", "c": cfg["c"]})  # b's key changed: reloaded
        eventually(lambda: "cluster b (west) reloaded" in ctl.logs(), what="b reloaded")
        time.sleep(1.0)
        assert {cl.name: len(writes(cl)) for cl in (a, b)} == before, "reloading b wrote to a or b"

        c.kube.service("shop", "api")
        c.kube.endpoints("shop", "api", "api-x", [("10.3.0.9", None)])
        c.kube.export("shop", "api")
        eventually(lambda: b.kube.serviceimport("shop", "api"), what="c's export imported in b")
        web = {cl.name: _versions(cl, "web") for cl in (a, b)}
        before_c = quiet(lambda: len(writes(c)))  # c's own export of api is written to c too
        mount(d, {"a": cfg["a"], "b": cfg["b"] + b"\n"})  # c's key removed
        eventually(lambda: b.kube.serviceimport("shop", "api") is None, what="c's export gone from b")
        eventually(lambda: a.kube.serviceimport("shop", "api") is None, what="c's export gone from a")
        assert not b.kube.imported_slices("shop", "api")
        time.sleep(1.0)
        assert {cl.name: _versions(cl, "web") for cl in (a, b)} == web, "a's web imports changed"
        assert len(writes(c)) == before_c, "the removed member was written to"
        assert ctl.proc.pid == pid and ctl.proc.poll() is None
        logs = ctl.logged("cluster c removed")
    assert "cluster c (north) added" in logs and "cluster c removed" in logs, logs


def quiet(count: Callable[[], int], still: float = 1.0, timeout: float = 30.0) -> int:
    """`count()` once it has not changed for `still` seconds (writes in flight have landed)."""
    last, since, end = count(), time.monotonic(), time.monotonic() + timeout
    while time.monotonic() < end:
        time.sleep(0.1)
        now = count()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= still:
            return now
    raise AssertionError(f"still changing after {timeout} s")


def _versions(cl: Cluster, svc: str) -> list[str]:
    """resourceVersions of a member's ServiceImport and imported slices of shop/`svc`."""
    objs = [cl.kube.imported("shop", svc), *cl.kube.imported_slices("shop", svc)]
    return sorted(str(o["metadata"]["resourceVersion"]) for o in objs)


def test_a_member_file_that_cannot_be_loaded_is_skipped_until_it_changes(clusters3: list[Cluster],
                                                                         tmp_path: Path) -> None:
    a, b, c = clusters3
    shop(a, clusters3, db=False)
    d = tmp_path / "members"
    cfg = {cl.name: cl.kubeconfig.read_bytes() for cl in clusters3}
    mount(d, {**cfg, "c": b"clusters: [oops"})
    with run_controller(["--members-dir", str(d)], tmp_path) as ctl:
        eventually(ctl.ready, what="first sync without c")
        ctl.logged("member c not loaded until the file changes")
        assert b.kube.serviceimport("shop", "web") is not None
        mount(d, cfg)
        eventually(lambda: c.kube.serviceimport("shop", "web"), what="c added once its file is fixed")
        assert ctl.logs().count("member c not loaded") == 1


def test_a_members_dir_member_and_a_cluster_member_of_one_name_is_refused(clusters3: list[Cluster],
                                                                          tmp_path: Path) -> None:
    a, b, _ = clusters3
    d = tmp_path / "members"
    mount(d, {"b": b.kubeconfig.read_bytes()})
    with run_controller(["--members-dir", str(d), "--cluster", f"b={b.kubeconfig}", "--once"],
                        tmp_path) as ctl:
        assert ctl.proc.wait(30) == 2
    assert "--members-dir" in ctl.logs() and "b also given by --cluster" in ctl.logs()


def test_controller_needs_a_cluster_or_a_members_dir(tmp_path: Path) -> None:
    with run_controller(["--once"], tmp_path) as ctl:
        assert ctl.proc.wait(30) == 2
    assert "--members-dir" in ctl.logs()


__all__ = ["Controller"]


def member_counters(ctl: Controller, member: str) -> dict[str, float]:
    """The controller's counter series of `member` (writes, attempts, API requests, unreachable)."""
    names = ("mcsdns_controller_writes_total", "mcsdns_controller_write_attempts_total",
             "mcsdns_controller_api_requests_total", "mcsdns_controller_member_unreachable_total")
    return {k: v for k, v in ctl.metrics().items()
            if k.startswith(names) and f'member="{member}"' in k}


def test_a_members_counters_survive_the_rotation_of_its_credential(clusters3: list[Cluster],
                                                                  tmp_path: Path) -> None:
    """b's kubeconfig in --members-dir gets a new token (a rotated credential): b is reloaded (a
    new client) and no counter series of b's drops or disappears."""
    a, b, _ = clusters3
    shop(a, clusters3, db=False)
    d = tmp_path / "members"
    cfg = {cl.name: cl.kubeconfig.read_bytes() for cl in (a, b)}
    mount(d, cfg)
    with run_controller(["--members-dir", str(d), "--resync", "600"], tmp_path) as ctl:
        eventually(ctl.ready, what="first sync")
        eventually(lambda: b.kube.serviceimport("shop", "web"), what="web imported in b")
        before = eventually(lambda: (c := member_counters(ctl, "b")) and any(
            "writes_total" in k and v > 0 for k, v in c.items()) and c, what="b's writes counted")
        rotated = json.loads(cfg["b"])
        rotated["users"][0]["user"]["token"] = "rotated-token-2"
        mount(d, {"a": cfg["a"], "b": json.dumps(rotated).encode()})
        eventually(lambda: "cluster b (west) reloaded" in ctl.logs(), what="b reloaded")
        a.kube.service("shop", "api")  # writes to b through its new client
        a.kube.endpoints("shop", "api", "api-x", [("10.1.0.9", None)])
        a.kube.export("shop", "api")
        eventually(lambda: b.kube.imported_slices("shop", "api"), what="api imported in b")
        time.sleep(1.0)
        after = member_counters(ctl, "b")
    print("b's counters before / after the rotation:",
          {k.split("{")[0].removeprefix("mcsdns_controller_") + k[k.index("{"):]: (v, after.get(k))
           for k, v in before.items() if v})
    dropped = {k: (v, after.get(k)) for k, v in before.items() if after.get(k, -1) < v}
    assert not dropped, f"counters that dropped or vanished: {dropped}"
    key = 'mcsdns_controller_writes_total{member="b",resource="endpointslices",verb="create"}'
    assert after[key] == before[key] + 1  # api's slice, written by the new client, added to the old count
