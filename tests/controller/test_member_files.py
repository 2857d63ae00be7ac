"""A member file (`mcsdns controller --members-dir`: a key of the members Secret) is data, not
a program (mcsdns/kube/apiclient/memberfile.py): one that names an exec plugin, a token file or any
other file is refused for that member before anything runs or is read, with one log line
naming the member and the field and `mcsdns_controller_member_file_refused{member,field}`;
the other members keep working. Whoever can write one key of the Secret must not get code
run next to every member's credentials, nor make the controller send a file of its own (its
ServiceAccount token) to a server of their choosing."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from support.controller_checks import mount
from support.controller_env import Cluster, eventually, run_controller, shop
from support.helpers import serve_http

from mcsdns.controller.member.directory import MembersDir
from mcsdns.controller.member.live import Membership
from mcsdns.kube.apiclient.kubeconfig import KubeconfigError, load

SECRET = "the-controllers-own-token-0123456789"
REFUSED = "mcsdns_controller_member_file_refused"


class _Recorder(BaseHTTPRequestHandler):
    """Any request: 401, its Authorization header kept in `seen`."""

    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.seen.append(self.headers.get("Authorization") or "")
        self.send_response(401)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_PUT = do_GET  # noqa: N815

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
        pass


@pytest.fixture
def recorder() -> Iterator[str]:
    """An API server of the attacker's: its URL; `_Recorder.seen` the credentials sent to it."""
    _Recorder.seen = []
    with serve_http(ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)) as url:
        yield url


def kubeconfig(server: str, user: dict[str, Any], cluster: dict[str, Any] | None = None) -> bytes:
    return json.dumps({"apiVersion": "v1", "kind": "Config", "current-context": "m",
                       "clusters": [{"name": "m", "cluster": {"server": server, **(cluster or {})}}],
                       "users": [{"name": "m", "user": user}],
                       "contexts": [{"name": "m", "context": {"cluster": "m", "user": "m"}}]}).encode()


def plugin(tmp_path: Path, marker: Path) -> Path:
    """An exec credential plugin that leaves `marker` behind (and answers with a token)."""
    p = tmp_path / "plugin"
    p.write_text(f"""#!{sys.executable}
import json, pathlib
pathlib.Path({str(marker)!r}).write_text("ran")
print(json.dumps({{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {{"token": "t"}}}}))
""")
    p.chmod(0o755)
    return p


def test_a_member_file_with_a_program_or_a_file_path_is_refused(clusters3: list[Cluster], recorder: str,
                                                                tmp_path: Path) -> None:
    """c's file runs a plugin, d's sends ../x/secret.txt (outside the directory) as its token:
    on main the plugin ran as the controller and the secret went to d's server hundreds of
    times. Now neither happens, a and b sync, and c joins once its file is data only."""
    a, b, c = clusters3
    shop(a, clusters3, db=False)
    marker = tmp_path / "plugin-ran"
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "secret.txt").write_text(SECRET)
    exec_user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "interactiveMode": "Never",
                          "command": str(plugin(tmp_path, marker))}}
    files = {"a": a.kubeconfig.read_bytes(), "b": b.kubeconfig.read_bytes(),
             "c": kubeconfig(c.api.url, exec_user),
             "d": kubeconfig(recorder, {"tokenFile": "../x/secret.txt"})}
    d = tmp_path / "members"
    mount(d, files)
    with run_controller(["--members-dir", str(d)], tmp_path) as ctl:
        eventually(ctl.ready, what="first sync of a and b")
        assert b.kube.serviceimport("shop", "web") is not None
        metrics = ctl.metrics()
        assert metrics[f'{REFUSED}{{field="exec",member="c"}}'] == 1.0, metrics
        assert metrics[f'{REFUSED}{{field="tokenFile",member="d"}}'] == 1.0, metrics
        ctl.logged("member c not loaded")
        logs = ctl.logged("member d not loaded")
        for member, fld in (("c", "exec"), ("d", "tokenFile")):
            lines = [ln for ln in logs.splitlines() if f"member {member} not loaded" in ln]
            assert len(lines) == 1 and f"user {fld} refused" in lines[0], logs
        mount(d, {**files, "c": c.kubeconfig.read_bytes()})  # c's file fixed: data only
        eventually(lambda: c.kube.serviceimport("shop", "web"), what="c synced once its file is data only")
        eventually(lambda: not any(k.startswith(REFUSED + '{field="exec"') for k in ctl.metrics()),
                   what="c's refusal cleared")
    assert not marker.exists(), "the member file's exec plugin ran"
    assert _Recorder.seen == [], f"{len(_Recorder.seen)} requests to the member file's server"
    assert c.kube.serviceimport("shop", "web") is not None


@pytest.mark.parametrize(("entry", "key", "value"), [
    ("user", "exec", {"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/true"}),
    ("user", "auth-provider", {"name": "oidc"}),
    ("user", "tokenFile", "/var/run/secrets/kubernetes.io/serviceaccount/token"),
    ("user", "client-certificate", "/etc/ssl/private/x.crt"),
    ("user", "client-key", "/etc/ssl/private/x.key"),
    ("user", "username", "admin"),
    ("user", "as", "system:admin"),
    ("cluster", "certificate-authority", "/no/such/ca.crt"),
])
def test_each_field_outside_the_allowlist_is_refused_before_it_is_read(entry: str, key: str, value: Any,
                                                                       tmp_path: Path) -> None:
    """The refusal names the field and comes first: no file it names is opened (the CA path
    does not exist; read, it would be "cannot read")."""
    user: dict[str, Any] = {"token": "t"}
    cluster: dict[str, Any] = {}
    (user if entry == "user" else cluster)[key] = value
    path = tmp_path / "m"
    path.write_bytes(kubeconfig("https://127.0.0.1:1", user, cluster))
    with pytest.raises(KubeconfigError) as e:
        load(str(path), None, data_only=True)
    assert e.value.refused == key and f"{entry} {key} refused" in str(e.value)
    assert "\n" not in str(e.value)


def test_inline_data_is_accepted_and_exec_only_when_allowed(tmp_path: Path) -> None:
    path = tmp_path / "m"
    ca = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="  # base64 PEM (its content is checked at connect)
    path.write_bytes(kubeconfig("https://127.0.0.1:1", {"token": "t", "extensions": []},
                                {"certificate-authority-data": ca, "tls-server-name": "kube.example",
                                 "proxy-url": "http://127.0.0.1:3128"}))
    cfg = load(str(path), None, data_only=True)
    assert cfg.identity.token == "t" and cfg.server.tls_server_name == "kube.example"
    exec_user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/true"}}
    path.write_bytes(kubeconfig("https://127.0.0.1:1", exec_user))
    with pytest.raises(KubeconfigError, match="--members-allow-exec allows exec"):
        load(str(path), None, data_only=True)
    assert load(str(path), None, data_only=True, allow_exec=True).identity.exec is not None


def test_members_allow_exec_lets_a_member_file_carry_a_plugin(tmp_path: Path) -> None:
    """The controller's opt-in reaches the loader; the refusal is kept for the metric until
    the file loads (nothing runs at load either way: a plugin runs at the first request)."""
    d = tmp_path / "members"
    exec_user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/true"}}
    mount(d, {"c": kubeconfig("https://127.0.0.1:1", exec_user)})
    strict = Membership(None, MembersDir(str(d)), set(), 4)
    assert strict.initial() == [] and strict.refused == {"c": "exec"}
    mount(d, {"c": kubeconfig("https://127.0.0.1:1", {"token": "t"})})
    assert [m.name for m in strict.initial()] == ["c"] and strict.refused == {}
    mount(d, {"c": kubeconfig("https://127.0.0.1:1", exec_user)})
    allowing = Membership(None, MembersDir(str(d)), set(), 4, allow_exec=True)
    assert [m.name for m in allowing.initial()] == ["c"] and allowing.refused == {}
