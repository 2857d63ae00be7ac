"""Answers before the first sync, and `--state-dir`: restarts while the Kubernetes API is down.

Against tests/fakeapi/ with the API stopped at start, over real sockets.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import threading
import time
from pathlib import Path
from typing import Any

import dns.flags
import dns.message
import dns.rcode
import pytest
from fakeapi import KubeAPI
from support.helpers import Server, run_server, wait_for
from support.kube_objects import example_names as example_queries
from support.kube_objects import example_objects

Z = "clusterset.local"
MCS = "multicluster.x-k8s.io"
SERVICE = "multicluster.kubernetes.io/service-name"
CLUSTER = "multicluster.kubernetes.io/source-cluster"
WRITES = 'mcsdns_state_writes_total{result="ok"}'


def service_import(name: str, ns: str, ips: list[str]) -> dict[str, Any]:
    return {"apiVersion": f"{MCS}/v1beta1", "kind": "ServiceImport",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"type": "ClusterSetIP", "ips": ips,
                     "ports": [{"name": "http", "protocol": "TCP", "port": 80}]}}


def answer(m: dns.message.Message) -> tuple[str, bool, list[str], list[str]]:
    """rcode, AA, and the sorted Answer and Additional records."""
    def rrs(section: list[Any]) -> list[str]:
        return sorted(f"{rr.name} {rr.rdtype} {rd}" for rr in section for rd in rr)
    return (dns.rcode.to_text(m.rcode()), bool(m.flags & dns.flags.AA), rrs(m.answer),
            rrs(m.additional))


def rcode(srv: Server, name: str, rdtype: str = "A", tcp: bool = False) -> str:
    return dns.rcode.to_text(srv.query(name, rdtype, tcp=tcp).rcode())


def addrs(srv: Server, name: str) -> list[str] | str:
    m = srv.query(name)
    if m.rcode() != dns.rcode.NOERROR:
        return dns.rcode.to_text(m.rcode())
    return sorted(str(rd) for rr in m.answer for rd in rr)


def saved_objects(path: Path) -> list[dict[str, Any]]:
    """The objects of a state file, read as its documented format: a JSON header line
    (with the body's length and SHA-256), then a JSON list."""
    head, _, body = path.read_bytes().partition(b"\n")
    header = json.loads(head)
    assert header["format"] == "mcsdns-objects" and header["bytes"] == len(body)
    assert header["sha256"] == hashlib.sha256(body).hexdigest()
    objs = json.loads(body)
    assert isinstance(objs, list)
    return objs


def down_api(tmp_path: Path) -> tuple[KubeAPI, Path]:
    """An API server that is not listening yet (down at start), and its kubeconfig."""
    from support.ports import free_port

    api = KubeAPI()
    api.port = free_port()
    return api, api.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.mark.parametrize("scope", ["all-namespaces", "two-namespaces"])
def test_restart_during_api_outage_serves_saved_state(scope: str, tmp_path: Path) -> None:
    api, kubeconfig = down_api(tmp_path)
    api.start()
    state_dir = tmp_path / "state"
    for o in example_objects():
        api.put(o)
    api.put(service_import("gone", "other", ["10.8.0.1"]))
    api.put(service_import("kept", "other", ["10.8.0.2"]))
    ns = ["--namespace", "shop", "--namespace", "other"] if scope == "two-namespaces" else []
    args = ["--kubeconfig", str(kubeconfig), "--state-dir", str(state_dir), "--state-interval",
            "0.2", *ns]
    queries = [*example_queries(), (f"gone.other.svc.{Z}", "A"), (f"kept.other.svc.{Z}", "A")]
    assert len(queries) > 20
    try:
        with run_server(args, tmp_path) as srv:
            before = {q: answer(srv.query(*q)) for q in queries}
            assert before[(f"gone.other.svc.{Z}", "A")][0] == "NOERROR"
            assert wait_for(lambda: srv.metric(WRITES) >= 1)
        assert (state_dir / "objects.json").exists()
        # The API goes away; meanwhile one service is deleted and one created.
        api.stop()
        api.delete("ServiceImport", "other", "gone")
        api.put(service_import("new", "other", ["10.8.0.3"]))
        with run_server(args, tmp_path, wait_ready=False) as srv:
            assert srv.http("/ready")[0] == 200  # documented: restored state counts as ready
            for q in queries:
                for tcp in (False, True):
                    assert answer(srv.query(*q, tcp=tcp)) == before[q], (q, tcp)
            assert rcode(srv, f"new.other.svc.{Z}") == "NXDOMAIN"  # as of the saved state
            assert srv.metric("mcsdns_state_restored ") == 1
            assert 0 < srv.metric("mcsdns_state_restored_age_seconds") < 120
            assert srv.metric('mcsdns_source_connected{source="kube"}') == 0
            assert re.search(r"serving restored state until the first sync: \d+ ServiceImports, "
                             r"\d+ EndpointSlices from .*objects.json, as of ", srv.logs())
            api.start()
            # the first sync replaces the restored state, deletions made meanwhile included
            assert wait_for(lambda: addrs(srv, f"gone.other.svc.{Z}") == "NXDOMAIN")
            assert wait_for(lambda: addrs(srv, f"new.other.svc.{Z}") == ["10.8.0.3"])
            assert wait_for(lambda: srv.metric("mcsdns_state_restored ") == 0)
            assert "live data replaces the restored state" in srv.logs()
            for q in queries:
                if q[0] != f"gone.other.svc.{Z}":
                    assert answer(srv.query(*q)) == before[q], q
            # and the snapshot follows: "gone" out, "new" in
            def names() -> set[str]:
                return {o["metadata"]["name"] for o in saved_objects(state_dir / "objects.json")
                        if o["kind"] == "ServiceImport"}
            assert wait_for(lambda: "new" in names() and "gone" not in names())
    finally:
        api.stop()


def _valid_state(namespaces: list[str], version: int = 1, body: bytes | None = None,
                 **times: float) -> bytes:
    """A well-formed state file (built by hand from the documented format) holding the
    ServiceImport foreign.shop -> 10.99.0.1 (or `body`), its times replaced by `times`."""
    if body is None:
        body = json.dumps([service_import("foreign", "shop", ["10.99.0.1"])]).encode()
    header = {"format": "mcsdns-objects", "version": version, "as_of": time.time(),
              "written": time.time(), "namespaces": namespaces, "objects": 1, "bytes": len(body),
              "sha256": hashlib.sha256(body).hexdigest(), **times}
    return json.dumps(header).encode() + b"\n" + body


BAD_STATES = {
    "empty": b"",
    "garbage": b"\x00\xffnot json at all\n\x01\x02",
    "truncated": _valid_state([])[:-7],
    "bit flip": _valid_state([]).replace(b"10.99.0.1", b"10.99.0.9"),
    "foreign JSON": b'{"apiVersion": "v1", "kind": "List", "items": []}\n[]',
    "other namespaces": _valid_state(["elsewhere"]),
    "newer version": _valid_state([], version=99),
    # hostile: each made `serve` exit 1 (OverflowError, ValueError, RecursionError)
    "400-digit as_of": _valid_state([], as_of=10**400),
    "NaN written": _valid_state([], written=float("nan")),
    "as_of in year 40000": _valid_state([], as_of=1.2e12),
    "deeply nested body": _valid_state([], body=b"[" * 100_000 + b"]" * 100_000),
}


@pytest.mark.parametrize("case", [*BAD_STATES, "a directory", "over 256 MiB"])
def test_corrupt_or_foreign_state_is_reported_and_ignored(case: str, tmp_path: Path) -> None:
    api, kubeconfig = down_api(tmp_path)
    api.put(service_import("web", "shop", ["10.6.0.1"]))
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    path = state_dir / "objects.json"
    if case == "a directory":
        path.mkdir()
    elif case == "over 256 MiB":  # sparse: refused by its size, never read
        path.write_bytes(_valid_state([]))
        os.truncate(path, (256 << 20) + 1)
    else:
        path.write_bytes(BAD_STATES[case])
    args = ["--kubeconfig", str(kubeconfig), "--state-dir", str(state_dir), "--state-interval", "0"]
    with run_server(args, tmp_path, wait_ready=False) as srv:
        assert srv.http("/ready")[0] == 503
        assert re.search(r"state file .*objects.json ignored: ", srv.logs())
        assert srv.metric("mcsdns_state_rejected_total") == 1
        for name in (f"foreign.shop.svc.{Z}", f"web.shop.svc.{Z}"):
            assert rcode(srv, name) == "SERVFAIL"
        api.start()
        try:
            assert wait_for(lambda: srv.http("/ready")[0] == 200)
            assert addrs(srv, f"web.shop.svc.{Z}") == ["10.6.0.1"]
            assert addrs(srv, f"foreign.shop.svc.{Z}") == "NXDOMAIN"  # never mixed in
            if case == "a directory":
                assert wait_for(lambda: srv.metric('mcsdns_state_writes_total{result="error"}') >= 1)
                assert "cannot write state file" in srv.logs()
            else:  # replaced by a good snapshot of the live data
                assert wait_for(lambda: srv.metric(WRITES) >= 1)
                assert [o["metadata"]["name"] for o in saved_objects(path)] == ["web"]
            assert srv.proc.poll() is None
        finally:
            api.stop()


def test_state_writes_never_follow_a_planted_symlink(tmp_path: Path) -> None:
    """The temporary files had predictable names (.objects.json.<pid>.tmp, serial.<pid>.tmp)
    and were opened through a symlink found there: whoever could write the directory had
    the server overwrite a file of their choice. Now each is a fresh file, mode 0600."""
    api, kubeconfig = down_api(tmp_path)
    api.put(service_import("web", "shop", ["10.6.0.1"]))
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    args = ["--kubeconfig", str(kubeconfig), "--state-dir", str(state_dir), "--state-interval", "0"]
    with run_server(args, tmp_path, wait_ready=False) as srv:
        victims = {}
        for name in (f".objects.json.{srv.proc.pid}.tmp", f"serial.{srv.proc.pid}.tmp"):
            victims[name] = tmp_path / f"victim-{name}"
            victims[name].write_bytes(b"precious\n")
            (state_dir / name).symlink_to(victims[name])
        api.start()
        try:
            assert wait_for(lambda: srv.metric(WRITES) >= 1)
            assert addrs(srv, f"web.shop.svc.{Z}") == ["10.6.0.1"]
        finally:
            api.stop()
    for victim in victims.values():
        assert victim.read_bytes() == b"precious\n"
    for name in ("objects.json", "serial"):
        st = os.lstat(state_dir / name)
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600, name
    assert [o["metadata"]["name"] for o in saved_objects(state_dir / "objects.json")] == ["web"]


def test_malformed_objects_in_a_valid_state_file_are_skipped(tmp_path: Path) -> None:
    api, kubeconfig = down_api(tmp_path)
    objs: list[Any] = [service_import("ok", "shop", ["10.6.0.2"]),
                       service_import("bad", "shop", ["not-an-ip"]),
                       {"kind": "ServiceImport", "metadata": "nonsense"}]
    body = json.dumps(objs).encode()
    header = {"format": "mcsdns-objects", "version": 1, "as_of": time.time() - 60,
              "written": time.time(), "namespaces": [], "objects": 3, "bytes": len(body),
              "sha256": hashlib.sha256(body).hexdigest()}
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "objects.json").write_bytes(json.dumps(header).encode() + b"\n" + body)
    args = ["--kubeconfig", str(kubeconfig), "--state-dir", str(tmp_path / "state")]
    with run_server(args, tmp_path, wait_ready=False) as srv:
        assert srv.http("/ready")[0] == 200
        assert addrs(srv, f"ok.shop.svc.{Z}") == ["10.6.0.2"]
        assert rcode(srv, f"bad.shop.svc.{Z}") == "NXDOMAIN"
        assert srv.metric('mcsdns_skipped_objects_total{kind="ServiceImport"}') == 2
        assert 60 <= srv.metric("mcsdns_state_restored_age_seconds") < 120


def test_state_written_at_most_every_interval_while_changes_arrive(tmp_path: Path) -> None:
    with KubeAPI() as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        state_dir = tmp_path / "state"
        args = ["--kubeconfig", str(kubeconfig), "--state-dir", str(state_dir),
                "--state-interval", "1"]
        with run_server(args, tmp_path) as srv:
            assert wait_for(lambda: srv.metric(WRITES) == 1)  # the first sync
            stop = threading.Event()

            last: list[str] = []

            def churn() -> None:
                i = 0
                while not stop.is_set():
                    i += 1
                    last[:] = [f"10.7.{i // 250}.{i % 250 + 1}"]
                    api.put(service_import("churn", "shop", last))
                    time.sleep(0.02)

            t = threading.Thread(target=churn)
            start = time.monotonic()
            t.start()
            time.sleep(3)
            stop.set()
            t.join()
            # the last change is served (not an earlier one still on its way), then saved
            assert wait_for(lambda: addrs(srv, f"churn.shop.svc.{Z}") == last)
            last_ip = last

            # the last change reaches the file within the interval, then writes stop
            def saved_ip() -> list[str]:
                return [ip for o in saved_objects(state_dir / "objects.json")
                        if o["metadata"]["name"] == "churn" for ip in o["spec"]["ips"]]
            assert wait_for(lambda: saved_ip() == last_ip)
            writes = srv.metric(WRITES)
            elapsed = time.monotonic() - start  # up to the count: load only makes it longer
            assert 2 <= writes <= 1 + elapsed / 1 + 2, writes
            time.sleep(1.5)
            assert srv.metric(WRITES) == writes
            assert not list(state_dir.glob(".*.tmp"))  # no temporary file left behind


def _lists_and_watches(api: KubeAPI, plural: str) -> tuple[int, int]:
    """(LISTs, watches) of `plural` the API server has served."""
    reqs = [p for m, p in list(api.requests) if m == "GET" and p.split("?")[0].endswith("/" + plural)]
    watches = sum(1 for p in reqs if "watch=" in p)
    return len(reqs) - watches, watches


def test_workers_share_one_list_and_watch_and_a_restarted_worker_gets_the_view(tmp_path: Path) -> None:
    """--workers 2 with the Kubernetes API: the supervisor alone lists and watches and relays
    to the workers; a worker restarted while the API is down gets the supervisor's last
    known view at once (binds, answers it, ready); changes after the outage reach both."""
    with KubeAPI() as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        api.put(service_import("web", "shop", ["10.6.0.1"]))
        with run_server(["--kubeconfig", str(kubeconfig), "--workers", "2"], tmp_path) as srv:
            assert _lists_and_watches(api, "serviceimports") == (1, 1)
            assert _lists_and_watches(api, "endpointslices") == (1, 1)
            pids = [int(p) for p in re.findall(r"worker \d started \(pid (\d+)\)", srv.logs())]
            assert len(pids) == 2 and srv.logs().count("listening on") == 2
            api.stop()
            import signal
            os.kill(pids[0], signal.SIGKILL)
            assert wait_for(lambda: len(re.findall(r"worker \d started", srv.logs())) == 3)
            assert wait_for(lambda: srv.logs().count("listening on") == 3)
            assert wait_for(lambda: srv.http("/ready")[0] == 200)
            for _ in range(100):  # both workers, the restarted one included, answer the view
                assert addrs(srv, f"web.shop.svc.{Z}") == ["10.6.0.1"]
            api.start()
            assert wait_for(lambda: srv.metric('mcsdns_source_connected{source="kube"}') == 1)
            time.sleep(0.5)
            mark = len(srv.logs())
            api.put(service_import("web", "shop", ["10.6.0.2"]))
            assert wait_for(lambda: all(addrs(srv, f"web.shop.svc.{Z}") == ["10.6.0.2"]
                                        for _ in range(20)))
            for _ in range(100):
                assert addrs(srv, f"web.shop.svc.{Z}") == ["10.6.0.2"]
            time.sleep(0.5)
            assert srv.logs()[mark:].count("(new)") == 1  # one change, one serial in every process
            lists, watches = _lists_and_watches(api, "serviceimports")
            assert lists <= 2 and watches <= 3  # the supervisor's relist/re-watch, not one per worker


def test_workers_start_once_the_zone_is_loaded(tmp_path: Path) -> None:
    """--workers 2, the API down from the start and no saved state: the workers are forked
    from the supervisor only once its zone is loaded, so no socket answers SERVFAIL before;
    after the first sync both answer."""
    api, kubeconfig = down_api(tmp_path)
    api.put(service_import("web", "shop", ["10.6.0.1"]))
    try:
        with run_server(["--kubeconfig", str(kubeconfig), "--workers", "2"], tmp_path,
                        wait_ready=False) as srv:
            assert wait_for(lambda: "once the zone is loaded" in srv.logs())
            time.sleep(1.0)
            assert "listening on" not in srv.logs() and "worker 0 started" not in srv.logs()
            assert srv.http("/ready")[0] == 503
            api.start()
            assert wait_for(lambda: srv.logs().count("listening on") == 2)
            assert wait_for(lambda: srv.http("/ready")[0] == 200)
            for _ in range(100):
                assert addrs(srv, f"web.shop.svc.{Z}") == ["10.6.0.1"]
    finally:
        api.stop()


def test_workers_restore_the_state_worker_0_wrote(tmp_path: Path) -> None:
    """--workers 2 --state-dir: worker 0 saves; after a restart with the API down both
    workers serve the saved state, so the supervisor is ready and every query is answered."""
    api, kubeconfig = down_api(tmp_path)
    api.start()
    api.put(service_import("web", "shop", ["10.6.0.1"]))
    args = ["--kubeconfig", str(kubeconfig), "--workers", "2", "--state-dir", str(tmp_path / "state")]
    try:
        with run_server(args, tmp_path) as srv:
            assert wait_for(lambda: srv.metric(WRITES) == 1)
            time.sleep(0.5)
            assert srv.metric(WRITES) == 1  # summed over workers: worker 0 alone writes
        api.stop()
        with run_server(args, tmp_path, wait_ready=False) as srv:
            assert wait_for(lambda: srv.http("/ready")[0] == 200)
            assert srv.metric("mcsdns_state_restored ") == 1
            for _ in range(50):
                assert addrs(srv, f"web.shop.svc.{Z}") == ["10.6.0.1"]
            assert srv.logs().count("serving restored state until the first sync") == 1  # the supervisor
    finally:
        api.stop()
