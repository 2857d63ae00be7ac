"""deploy/monitoring: the rules under promtool, the kustomize components (server, controller,
dashboard, CoreDNS compatibility) and what each install loads, the dashboard, and a real
Prometheus scraping a running `mcsdns serve` and `mcsdns controller` (Debian's `prometheus`
package: prometheus and promtool)."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dns.exception
import dns.message
import dns.query
import dns.rcode
import yaml
from fakeapi.credential import jwt, with_token
from support.controller_env import Cluster, run_controller, shop
from support.helpers import LIVENESS, REPO, run_server, tool, wait_for
from support.monitoring import (
    COMPAT_RULES,
    CONTROLLER_RULES,
    MONITORING,
    RULE_FILES,
    SERVER_RULES,
    Obj,
    Prometheus,
    groups,
    prometheus,
    render,
    traffic,
)

UNIT_TESTS = sorted((MONITORING / "tests").glob("*.tests.yaml"))
DASHBOARD = MONITORING / "dashboard" / "mcsdns.json"
OPERATIONS = REPO / "docs" / "operations.md"


def rules(*files: Path) -> list[Obj]:
    """The alerting rules of `files` (default: the server's and the controller's)."""
    return [r for g in groups(*(files or (SERVER_RULES, CONTROLLER_RULES))) for r in g["rules"]
            if "alert" in r]


def dashboard_exprs() -> list[str]:
    return [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p.get("targets", [])]


# --- static checks -----------------------------------------------------------------------------
def test_promtool_checks_the_rule_files() -> None:
    for f in RULE_FILES:
        out = subprocess.run([tool("promtool"), "check", "rules", str(f)], capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr
        assert f"SUCCESS: {len(groups(f)[0]['rules'])} rules found" in out.stdout


def test_promtool_unit_tests_pass() -> None:
    """Each rule file has its own unit tests, loading that file alone."""
    assert {yaml.safe_load(t.read_text())["rule_files"][0].rsplit("/", 1)[1] for t in UNIT_TESTS} == {
        f.name for f in RULE_FILES}
    out = subprocess.run([tool("promtool"), "test", "rules", *(t.name for t in UNIT_TESTS)],
                         capture_output=True, text=True, cwd=UNIT_TESTS[0].parent)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("SUCCESS") == len(UNIT_TESTS), out.stdout


def test_server_and_controller_alerts_are_separate_groups_and_files() -> None:
    """A server-only install loads no controller alert: every alert about the controller (its
    metrics, its job) is in the controller's file, and none of the server's names it."""
    server, controller = rules(SERVER_RULES), rules(CONTROLLER_RULES)
    assert [g["name"] for g in groups(SERVER_RULES)] == ["mcsdns"]
    assert [g["name"] for g in groups(CONTROLLER_RULES)] == ["mcsdns-controller"]
    assert server and controller
    for r in server:
        assert "controller" not in r["expr"] and not r["alert"].startswith("MCSDNSController"), r["alert"]
    for r in controller:
        assert r["alert"].startswith("MCSDNSController"), r["alert"]
        assert "$labels.cluster" not in str(r["annotations"]), r["alert"]
    # the member label is `member` everywhere: rules, dashboard, the controller's own series
    text = SERVER_RULES.read_text() + CONTROLLER_RULES.read_text() + DASHBOARD.read_text()
    assert "{{cluster}}" not in text and "by (cluster)" not in text and "$labels.cluster" not in text


def test_every_alert_has_a_firing_and_a_quiet_unit_test_and_a_runbook() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for t in (t for f in UNIT_TESTS for case in yaml.safe_load(f.read_text())["tests"]
              for t in case.get("alert_rule_test", [])):
        (firing if t.get("exp_alerts") else quiet).add(t["alertname"])
    docs = OPERATIONS.read_text()
    headings = {h.strip() for h in re.findall(r"^### (.+)$", docs, re.M)}
    for r in rules():
        name = r["alert"]
        assert name in firing and name in quiet, name
        assert r["labels"]["severity"] in {"critical", "warning", "info"}, name
        assert r["annotations"]["summary"] and r["annotations"]["description"], name
        assert r["annotations"]["runbook_url"].endswith(f"docs/operations.md#{name.lower()}"), name
        assert name in headings, f"no runbook section '### {name}' in docs/operations.md"


def test_generated_prometheusrule_and_dashboard_are_current() -> None:
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "gen-monitoring"), "--check"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_dashboard_is_importable_with_a_datasource_variable() -> None:
    d = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in d["templating"]["list"]}
    ds = variables["datasource"]
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"
    panels = [p for p in d["panels"] if p["type"] != "row"]
    assert len({p["id"] for p in d["panels"]}) == len(d["panels"])
    for p in panels:
        assert p["datasource"]["uid"] == "${datasource}" and p["targets"], p["title"]
        assert all(t["datasource"]["uid"] == "${datasource}" for t in p["targets"]), p["title"]
    titles = " ".join(p["title"].lower() for p in panels)
    for topic in ("type", "rcode", "duration", "cache hit", "zone size", "zone changes", "source",
                  "transfers", "reconciles", "reconcile duration", "work queue", "api requests", "events",
                  "writes", "reachability"):
        assert topic in titles, topic
    # cluster and job variables, and every panel filtered by them
    assert [v["name"] for v in d["templating"]["list"]] == ["datasource", "cluster", "job", "instance"]
    for v in ("cluster", "job"):
        assert variables[v]["includeAll"] and variables[v]["allValue"] == ".*"
    for e in dashboard_exprs():
        assert 'cluster=~"$cluster"' in e and 'job=~"$job"' in e and 'job="' not in e, e


def one(objs: list[Obj], kind: str, name: str) -> Obj:
    return next(o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name)


def loaded_alerts(objs: list[Obj]) -> set[str]:
    return {r.get("alert") or r["record"] for o in objs if o["kind"] == "PrometheusRule"
            for g in o["spec"]["groups"] for r in g["rules"]}


def check_monitor(objs: list[Obj], name: str, deployment: str) -> None:
    """The ServiceMonitor `name` selects the Service `name` (so the job is `name`), which
    selects the pods of `deployment` only, on a port they serve /metrics on."""
    sm, svc = one(objs, "ServiceMonitor", name), one(objs, "Service", name)
    dep = one(objs, "Deployment", deployment)
    assert sm["metadata"]["namespace"] == svc["metadata"]["namespace"] == "mcsdns-system"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    others = [o for o in objs if o["kind"] == "Service" and o is not svc]
    match = sm["spec"]["selector"]["matchLabels"].items()
    assert not any(match <= o["metadata"]["labels"].items() for o in others)
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    for d in (o for o in objs if o["kind"] == "Deployment" and o is not dep):
        assert not svc["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()
    ep = sm["spec"]["endpoints"][0]
    assert ep["path"] == "/metrics" and "relabelings" not in ep  # the job is the Service's name
    target = next(p["targetPort"] for p in svc["spec"]["ports"] if p["name"] == ep["port"])
    c = dep["spec"]["template"]["spec"]["containers"][0]
    port = next(p["containerPort"] for p in c["ports"] if target in (p["name"], p["containerPort"]))
    assert any(a in (f"--metrics=0.0.0.0:{port}", f"--health=0.0.0.0:{port}", f"--metrics=:{port}")
               for a in c["args"]) or port == 9153, c["args"]


def test_full_install_monitors_server_and_controller() -> None:
    objs = render("monitoring")
    check_monitor(objs, "mcsdns", "mcsdns")
    check_monitor(objs, "mcsdns-controller", "mcsdns-controller")
    assert not [o for o in objs if o["kind"] == "PodMonitor"]
    for name, f in (("mcsdns", SERVER_RULES), ("mcsdns-controller", CONTROLLER_RULES),
                    ("mcsdns-coredns-compat", COMPAT_RULES)):
        assert one(objs, "PrometheusRule", name)["spec"]["groups"] == groups(f), name
    assert loaded_alerts(objs) >= {r["alert"] for r in rules()}
    cm = one(objs, "ConfigMap", "mcsdns-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["mcsdns.json"]) == json.loads(DASHBOARD.read_text())


def test_server_only_install_loads_no_controller_alert_or_scrape() -> None:
    objs = render("server-monitoring")
    check_monitor(objs, "mcsdns", "mcsdns")
    monitors = {o["metadata"]["name"] for o in objs if o["kind"] in ("ServiceMonitor", "PodMonitor")}
    assert monitors == {"mcsdns"}
    loaded = loaded_alerts(objs)
    assert "MCSDNSAbsent" in loaded and "coredns_dns_requests_total" in loaded
    assert not {a for a in loaded if "Controller" in a}, loaded
    assert "MCSDNSControllerAbsent" in {r["alert"] for r in rules(CONTROLLER_RULES)}
    panels = json.loads(one(objs, "ConfigMap", "mcsdns-dashboard")["data"]["mcsdns.json"])["panels"]
    exprs = [t["expr"] for p in panels for t in p.get("targets") or []]
    assert exprs and not [e for e in exprs if "mcsdns_controller" in e]  # no empty controller panel
    assert not [p for p in panels if p["title"] == "Controller"]
    assert {p["title"] for p in panels} < {p["title"] for p in json.loads(DASHBOARD.read_text())["panels"]}


def test_gen_monitoring_writes_copies_for_other_jobs(tmp_path: Path) -> None:
    """`scripts/gen-monitoring --out DIR --server-job ... --controller-job ...`: the same rules
    selecting other jobs, still passing promtool."""
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "gen-monitoring"), "--out", str(tmp_path),
                          "--server-job", "dns", "--controller-job", "mcs-sync", "--zone", "mcs.example"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    server = (tmp_path / "rules" / SERVER_RULES.name).read_text()
    controller = (tmp_path / "rules" / CONTROLLER_RULES.name).read_text()
    compat = (tmp_path / "rules" / COMPAT_RULES.name).read_text()
    assert 'job="mcsdns"' not in server + compat and 'job="dns"' in server and 'job="dns"' in compat
    assert 'job="mcs-sync"' in controller and 'job="mcsdns' not in controller
    assert "zone: mcs.example." in compat and "clusterset.local." not in compat.split("groups:")[1]
    pr = yaml.safe_load((tmp_path / "controller" / "prometheusrule.yaml").read_text())
    assert pr["spec"]["groups"] == yaml.safe_load(controller)["groups"]
    files = [str(p) for p in (tmp_path / "rules").iterdir()]
    check = subprocess.run([tool("promtool"), "check", "rules", *files], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


@contextmanager
def secondary(rcode: dns.rcode.Rcode) -> Iterator[int]:
    """A UDP port that answers every message (NOTIFY) with `rcode`, as a secondary would."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                data, peer = sock.recvfrom(4096)
            except TimeoutError:
                continue
            reply = dns.message.make_response(dns.message.from_wire(data))
            reply.set_rcode(rcode)
            sock.sendto(reply.to_wire(), peer)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield int(sock.getsockname()[1])
    finally:
        stop.set()
        t.join()
        sock.close()


SELECTOR = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?(?!\s*\()")


def fill(expr: str) -> str:
    """A dashboard expression with its variables set to All and the rate interval to 15 s."""
    for v in ("cluster", "job", "instance"):
        expr = expr.replace(f'=~"${v}"', '=~".*"')
    return expr.replace("$__rate_interval", "15s")


def selectors(expr: str) -> set[str]:
    """The vector selectors of a PromQL expression (metric name and label matchers), with the
    dashboard's variables filled in."""
    expr = fill(expr)
    out = set()
    for m in SELECTOR.finditer(expr):
        if re.match(r"(mcsdns_|process_|up$)", m.group(1)):
            out.add(m.group(1) + (m.group(2) or ""))
    return out


def wait_firing(prom: Prometheus, want: set[str], timeout: float = LIVENESS) -> None:
    """Until exactly `want` fires, and still does three evaluations later."""
    deadline = time.monotonic() + timeout
    got: set[str] = set()
    while time.monotonic() < deadline:
        got = prom.firing()
        if got == want:
            time.sleep(3)
            got = prom.firing()
            if got == want:
                return
        time.sleep(0.5)
    raise AssertionError(f"firing {sorted(got)}, expected {sorted(want)}")


def test_real_prometheus_fires_the_expected_alerts_and_every_expression_has_series(
        clusters2: list[Cluster], tmp_path: Path) -> None:
    a, b = clusters2
    shop(a, clusters2, web=("10.1.0.5",), db=False)
    # a ServiceImport mcsdns cannot use (no valid ClusterSetIP): skipped and counted
    a.kube.create(f"{a.kube.mcs}/namespaces/shop/serviceimports",
                  {"apiVersion": a.kube.mcs_api_version, "kind": "ServiceImport",
                   "metadata": {"name": "broken", "namespace": "shop"},
                   "spec": {"type": "ClusterSetIP", "ips": ["999.0.0.1"], "ports": [{"port": 80}]}})
    a.api.deny("serviceimports")  # the server cannot list: no first sync, SERVFAIL
    b.stop()  # the controller cannot reach member b
    state_dir = tmp_path / "state"
    start = time.time()
    ja = with_token(a.kubeconfig, jwt(start + 9e5, start), tmp_path / "a-jwt")  # a's credential expiry series
    members = tmp_path / "members"  # a member file with a program in it: the refused-file series
    members.mkdir()
    (members / "c").write_text(
        "current-context: c\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "users: [{name: c, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: 'true'}}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: c}}]\n")
    with secondary(dns.rcode.NOERROR) as good, secondary(dns.rcode.REFUSED) as bad, \
            run_server(["--kubeconfig", str(a.kubeconfig), "--state-dir", str(state_dir),
                        "--state-interval", "0.2", "--notify", f"127.0.0.1:{good}",
                        "--notify", f"127.0.0.1:{bad}"], tmp_path, wait_ready=False) as srv, \
            run_controller(["--cluster", f"a={ja}", "--cluster", f"b={b.kubeconfig}", "--members-dir",
                            str(members), "--clusterset-cidr", "10.99.0.0/16", "--resync", "1"],
                           tmp_path) as ctl, \
            prometheus(tmp_path, {"mcsdns": srv.http_port, "mcsdns-controller": ctl.health}) as prom:
        assert wait_for(lambda: prom.targets_up() == {"mcsdns", "mcsdns-controller"})
        # 1. before the first sync: queries get SERVFAIL; a secondary's zone transfers are refused
        with traffic(srv) as rcodes:
            wait_firing(prom, {"MCSDNSNotReady", "MCSDNSSourceDisconnected", "MCSDNSServfailRatio",
                               "MCSDNSTransfersFailing", "MCSDNSControllerMemberUnreachable",
                               "MCSDNSControllerMemberFileRefused"})
        assert rcodes == {"SERVFAIL", "AXFR REFUSED"}
        # 2. the API lets the server list, member b is back: synced, NOTIFY goes to both
        #    secondaries and one refuses it; a snapshot is written, then writing it fails
        a.api.allow()
        b.start()
        assert wait_for(lambda: srv.http("/ready")[0] == 200), srv.logs()
        assert wait_for(lambda: srv.metric('mcsdns_state_writes_total{result="ok"}') >= 1)
        objects = state_dir / "objects.json"
        objects.unlink()
        objects.mkdir()  # a directory where the file goes: every later write fails
        a.kube.service("shop", "api")  # a change, so the snapshot is written again
        a.kube.endpoints("shop", "api", "api-abc", [("10.1.0.9", None)])
        a.kube.export("shop", "api")
        assert wait_for(lambda: srv.metric('mcsdns_state_writes_total{result="error"}') >= 1), srv.logs()
        # the SERVFAIL ratio and the refused transfer stay within their windows (5 and 15 min)
        wait_firing(prom, {"MCSDNSServfailRatio", "MCSDNSTransfersFailing", "MCSDNSNotifyUnanswered",
                           "MCSDNSControllerMemberFileRefused"})
        alerts = prom.api("alerts")["alerts"]
        assert {a["labels"].get("target") for a in alerts
                if a["labels"]["alertname"] == "MCSDNSNotifyUnanswered"} == {f"127.0.0.1:{bad}"}
        time.sleep(2)  # one more scrape of everything
        # 3. every selector of every rule and dashboard panel had series in this scrape
        span = {"start": str(start), "end": str(time.time())}
        exprs = [r["expr"] for r in rules()] + dashboard_exprs()
        sels = sorted(set().union(*(selectors(e) for e in exprs)))
        assert len(sels) >= 30
        empty = [s for s in sels if not prom.api("series", **{"match[]": s}, **span)]
        assert not empty, f"selectors without series: {empty}"
        # ... and every dashboard expression returned data
        blank = [e for e in dashboard_exprs()
                 if not prom.api("query_range", query=fill(e), step="1", **span)["result"]]
        assert not blank, f"dashboard expressions without data: {blank}"


def test_selector_extraction_finds_misspelt_names() -> None:
    """The series check above sees every metric a rule names, misspellings included."""
    got = selectors('sum by (job) (rate(mcsdns_dns_responces_total{job="mcsdns",rcode="SERVFAIL"}[5m]))'
                    ' / on (job) up{job="mcsdns"} and time() - mcsdns_x > 0')
    assert got == {'mcsdns_dns_responces_total{job="mcsdns",rcode="SERVFAIL"}', 'up{job="mcsdns"}',
                   "mcsdns_x"}
