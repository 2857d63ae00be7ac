"""Kubernetes API errors are explained: the API's own message, the RBAC rule a 403 lacks, each
distinct refusal logged once, "the last known data" only when there is some; `records` says what
it waits for and why it gave up."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fakeapi import KubeAPI
from support.helpers import run_server, wait_for
from support.kube_objects import addrs, service_import
from support.ports import free_port

from mcsdns.kube.apiclient.errors import ApiError, Request, explain

Z = "clusterset.local"
USER = "system:serviceaccount:dns:mcsdns"
FORBIDDEN = (f'serviceimports.multicluster.x-k8s.io is forbidden: User "{USER}" cannot list resource '
             '"serviceimports" in API group "multicluster.x-k8s.io" at the cluster scope')
RULE = ('add to the ClusterRole: apiGroups: ["multicluster.x-k8s.io"], resources: ["serviceimports"], '
        'verbs: ["list","watch"]')


def si_lists(api: KubeAPI) -> int:
    return sum(1 for _, u in api.requests if "/serviceimports" in u and "watch=" not in u)


def test_refusal_logged_once_with_message_and_rule(tmp_path: Path) -> None:
    with KubeAPI() as api:
        api.user = USER
        api.put(service_import("web", "shop", ["10.6.0.1"]))
        api.deny("serviceimports")
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        with run_server(["--kubeconfig", str(kubeconfig)], tmp_path, wait_ready=False) as srv:
            assert wait_for(lambda: si_lists(api) >= 4), api.requests  # several retries
            logs = srv.logs()
            assert logs.count(FORBIDDEN) == 1, logs
            assert logs.count(RULE) == 1, logs
            assert "HTTP 403 Forbidden" in logs
            assert "last known data" not in logs, logs
            assert "no data yet: answering SERVFAIL until the first sync" in logs, logs
            # allowed: synced and ready; refused again: logged again, now with data served
            api.allow()
            assert wait_for(lambda: srv.http("/ready")[0] == 200)
            api.deny("serviceimports")
            api.drop_watches()
            watch = FORBIDDEN.replace("cannot list", "cannot watch")  # the re-watch is refused
            assert wait_for(lambda: watch in srv.logs()), srv.logs()
            line = [x for x in srv.logs().splitlines() if watch in x][-1]
            assert RULE in line and "serving the last known data" in line, line
            assert addrs(srv, f"web.shop.svc.{Z}") == ["10.6.0.1"]


def test_server_error_logs_status_and_reason(tmp_path: Path) -> None:
    with KubeAPI() as api:
        api.fail_next(10_000, 500, "InternalError", "etcdserver: request timed out")
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        with run_server(["--kubeconfig", str(kubeconfig)], tmp_path, wait_ready=False) as srv:
            assert wait_for(lambda: "etcdserver" in srv.logs()), srv.logs()
            assert "HTTP 500 InternalError: etcdserver: request timed out" in srv.logs()
            api.fail_next(0)
            assert wait_for(lambda: srv.http("/ready")[0] == 200)


def test_records_against_an_unreachable_api(tmp_path: Path) -> None:
    api = KubeAPI()
    api.port = free_port()  # nothing listens there
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "mcsdns", "records", "--kubeconfig", str(kubeconfig),
                        "--timeout", "2"], capture_output=True, text=True, timeout=30)
    elapsed = time.monotonic() - t0
    assert p.returncode == 1 and not p.stdout, p
    print(f"\n`records --timeout 2` gave up after {elapsed:.2f} s")
    assert elapsed >= 2, elapsed  # it waited its --timeout (the message below names it)
    err = p.stderr.splitlines()
    # the reflector's own warning may come before it: the source is started, then asked
    waiting = f"mcsdns: waiting up to 2s for ServiceImports and EndpointSlices from the " \
              f"Kubernetes API {api.url}"
    assert err.count(waiting) == 1, err
    last = [x for x in err if x.startswith("mcsdns: no first sync within 2s: ")]
    assert len(last) == 1 and api.url in last[0] and "Connection refused" in last[0], err
    assert err.index(waiting) < err.index(last[0]), err
    assert "last known data" not in p.stderr


def test_records_help_shows_the_timeout_default() -> None:
    p = subprocess.run([sys.executable, "-m", "mcsdns", "records", "--help"], capture_output=True,
                       text=True, check=True)
    assert "(default 30)" in " ".join(p.stdout.split()), p.stdout


@pytest.mark.parametrize(("path", "verbs", "rule"), [
    ("/apis/multicluster.x-k8s.io/v1beta1/serviceimports", ("list", "watch"), RULE),
    ("/apis/discovery.k8s.io/v1/namespaces/shop/endpointslices", ("list", "watch"),
     'add to a Role in namespace "shop" (or the ClusterRole): apiGroups: ["discovery.k8s.io"], '
     'resources: ["endpointslices"], verbs: ["list","watch"]'),
    ("/api/v1/services", ("list", "watch"),
     'add to the ClusterRole: apiGroups: [""], resources: ["services"], verbs: ["list","watch"]'),
    ("/apis/multicluster.x-k8s.io/v1alpha1/namespaces/a/serviceimports/db/status", ("update",),
     'add to a Role in namespace "a" (or the ClusterRole): apiGroups: ["multicluster.x-k8s.io"], '
     'resources: ["serviceimports/status"], verbs: ["update"]'),
])
def test_rbac_rule_of_a_request(path: str, verbs: tuple[str, ...], rule: str) -> None:
    req = Request.of(path, verbs)
    assert req is not None and req.rule() == rule


def test_controller_refusal_logged_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from mcsdns.controller.informers import MemberCaches
    from mcsdns.controller.member.client import Member

    caplog.set_level(logging.INFO, "mcsdns.controller")
    with KubeAPI() as api:
        api.user = USER
        api.deny("serviceexports")
        m = Member("a", str(api.write_kubeconfig(tmp_path / "kubeconfig")), cluster_id="a")
        m.connect()
        stop = threading.Event()
        caches = MemberCaches(m, lambda k: None, lambda ns: None, stop)
        caches.start()
        try:
            def lists() -> int:
                return sum(1 for _, u in api.requests if "/serviceexports" in u)

            assert wait_for(lambda: lists() >= 4), api.requests
            msgs = [r.getMessage() for r in caplog.records]
            hits = [x for x in msgs if 'cannot list resource "serviceexports"' in x]
            assert len(hits) == 1, msgs
            assert hits[0].startswith("cluster a unreachable: serviceexports: HTTP 403 Forbidden: "
                                      "serviceexports.multicluster.x-k8s.io is forbidden: "), hits
            assert hits[0].endswith('add to the ClusterRole: apiGroups: ["multicluster.x-k8s.io"], '
                                    'resources: ["serviceexports"], verbs: ["list","watch"]'), hits
            # a refused write (reconcile.py logs `explain` of it) names its own rule
            api.deny("serviceimports", ["create"])
            with pytest.raises(ApiError) as e:
                m.request("POST", "/apis/multicluster.x-k8s.io/v1beta1/namespaces/shop/serviceimports",
                          {"metadata": {"name": "db"}, "spec": {"type": "ClusterSetIP"}})
            assert explain(e.value) == (
                'HTTP 403 Forbidden: serviceimports.multicluster.x-k8s.io is forbidden: User '
                f'"{USER}" cannot create resource "serviceimports" in API group "multicluster.x-k8s.io" '
                'in the namespace "shop"; add to a Role in namespace "shop" (or the ClusterRole): '
                'apiGroups: ["multicluster.x-k8s.io"], resources: ["serviceimports"], verbs: ["create"]')
        finally:
            stop.set()
            m.close()


def test_cli_lines_are_single_writes_so_log_lines_cannot_split_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's own stderr lines (`records` waiting / giving up, `join`, configuration
    errors) are each one write: a reflector thread's log line landed inside
    "waiting up to 2s for ... <url>" and its newline (seen in CI)."""
    from mcsdns import flags

    class Writes(io.StringIO):
        calls: list[str] = []

        def write(self, s: str) -> int:
            self.calls.append(s)
            return super().write(s)

    out = Writes()
    monkeypatch.setattr(sys, "stderr", out)
    flags.tell("mcsdns: waiting up to 2s for the Kubernetes API")
    assert flags.fail("bad   flag") == 2
    assert out.calls == ["mcsdns: waiting up to 2s for the Kubernetes API\n", "mcsdns: bad flag\n"]
