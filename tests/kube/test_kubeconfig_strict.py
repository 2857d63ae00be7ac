"""A kubeconfig is read as strictly as kubectl reads it (mcsdns/kube/apiclient/kubeconfig.py,
credentials.py): a boolean is a YAML boolean, insecure with a CA is an error, an exec
plugin's stanza and answer are checked as client-go checks them (no request goes out
without the credential it failed to give), its stderr is never shown beyond a redacted first
line, impersonation is sent as client-go sends it, and the user info of a server URL never
reaches a message, a log or a kubeconfig `join` writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from fakeapi import KubeAPI
from support.helpers import serve_http

from mcsdns.kube.apiclient.client import Client
from mcsdns.kube.apiclient.errors import Unreachable
from mcsdns.kube.apiclient.kubeconfig import KubeconfigError, load
from mcsdns.kube.resources import NAMESPACES
from mcsdns.members.kubeconfig import admin_cluster

ROOT = Path(__file__).resolve().parents[2]
V1 = "client.authentication.k8s.io/v1"
CA = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="  # base64 of a PEM header


def write(tmp_path: Path, cluster: dict[str, Any], user: dict[str, Any], server: str = "https://127.0.0.1:1",
          name: str = "kc") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server, **cluster}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return path


INSECURE = "insecure-skip-tls-verify"
WITH_CA = "specifying a root certificates file with the insecure flag is not allowed"  # kubectl's words
Case = tuple[dict[str, Any], dict[str, Any], str]
STRICT: dict[str, Case] = {  # case: (cluster, user, what the one line says)
    "insecure-string-false": ({INSECURE: "false"}, {}, f"{INSECURE} must be true or false, not a str"),
    "insecure-number": ({INSECURE: 1}, {}, f"{INSECURE} must be true or false"),
    "compression-string": ({"disable-compression": "no"}, {}, "disable-compression must be true or false"),
    "insecure-with-ca-data": ({INSECURE: True, "certificate-authority-data": CA}, {}, WITH_CA),
    "insecure-with-ca-file": ({INSECURE: True, "certificate-authority": "/etc/hostname"}, {}, WITH_CA),
    "provide-cluster-info-string": ({}, {"exec": {"apiVersion": V1, "command": "x",
                                                  "provideClusterInfo": "true"}},
                                    "provideClusterInfo must be true or false"),
    "exec-unknown-version": ({}, {"exec": {"apiVersion": "client.authentication.k8s.io/v1alpha1",
                                           "command": "x"}},
                             "exec plugin: invalid apiVersion 'client.authentication.k8s.io/v1alpha1'"),
    "exec-no-version": ({}, {"exec": {"command": "x"}}, "exec plugin: invalid apiVersion 'None'"),
    "groups-without-user": ({}, {"as-groups": ["system:masters"]},
                            "requesting uid, groups or user-extra without impersonating a user"),
    "certificate-without-key": ({}, {"client-certificate-data": CA}, "a client certificate needs its key"),
}


@pytest.mark.parametrize("case", sorted(STRICT))
def test_what_kubectl_refuses_is_one_line(case: str, tmp_path: Path) -> None:
    cluster, user, want = STRICT[case]
    kc = write(tmp_path, cluster, user)
    with pytest.raises(KubeconfigError) as e:
        Client.load(str(kc), None)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"kubeconfig {kc}") and want in msg, msg


def test_a_string_boolean_is_exit_2_in_every_command(tmp_path: Path) -> None:
    kc = write(tmp_path, {"insecure-skip-tls-verify": "false"}, {"token": "t"})
    for cmd in (["diagnose", "--kubeconfig", str(kc)], ["controller", "--cluster", f"a={kc}", "--once"]):
        run = subprocess.run([sys.executable, "-m", "mcsdns", *cmd], capture_output=True, text=True,
                             timeout=60, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
        err = run.stderr.strip().splitlines()
        assert run.returncode == 2 and len(err) == 1 and "must be true or false" in err[0], (cmd, run.stderr)


@pytest.fixture
def api() -> Iterator[KubeAPI]:
    with KubeAPI() as a:
        yield a


def plugin(tmp_path: Path) -> Path:
    """A plugin printing $ANSWER, writing $ERR to stderr, exiting with $CODE."""
    p = tmp_path / "plugin"
    p.write_text(f"#!{sys.executable}\nimport os, sys\nsys.stderr.write(os.environ.get('ERR', ''))\n"
                 "print(os.environ.get('ANSWER', ''))\nsys.exit(int(os.environ.get('CODE', '0')))\n")
    p.chmod(0o755)
    return p


def cred(status: Any, api_version: str = V1, kind: str = "ExecCredential") -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, **({} if status is None else {"status": status})}


ANSWERS = {  # case: (the plugin's answer, what the error says; "" when it is accepted)
    "good": (cred({"token": "good", "expirationTimestamp": "2999-01-01T00:00:00+02:00"}), ""),
    "other-version": (cred({"token": "good"}, api_version="client.authentication.k8s.io/v1beta1"),
                      "configured to use API version client.authentication.k8s.io/v1, the plugin returned"),
    "other-kind": (cred({"token": "good"}, kind="Secret"), "not an ExecCredential"),
    "empty-status": (cred({}), "the plugin returned no token and no certificate and key"),
    "no-status": (cred(None), "the plugin returned no status"),
    "certificate-alone": (cred({"clientCertificateData": "-----BEGIN CERTIFICATE-----"}),
                          "only a certificate or a key, not both"),
    "stamp-without-zone": (cred({"token": "good", "expirationTimestamp": "2999-01-01T00:00:00"}),
                           "expirationTimestamp is not an RFC 3339 time with a zone"),
    "not-json": ("token: good", "not an ExecCredential: not JSON"),
}


@pytest.mark.parametrize("case", sorted(ANSWERS))
def test_an_exec_credential_is_checked_as_client_go_checks_it(case: str, api: KubeAPI,
                                                              tmp_path: Path) -> None:
    """A bad answer is an error naming the fault, and no request goes out (main sent one with
    no credentials after `status: {}`)."""
    answer, want = ANSWERS[case]
    env = [{"name": "ANSWER", "value": answer if isinstance(answer, str) else json.dumps(answer)}]
    kc = write(tmp_path, {}, {"exec": {"apiVersion": V1, "command": str(plugin(tmp_path)), "env": env}},
               api.url)
    c = Client.load(str(kc), None)
    if not want:
        assert c.get(NAMESPACES.path())["kind"] == "NamespaceList"
        return
    with pytest.raises(Unreachable) as e:
        c.get(NAMESPACES.path())
    assert want in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert api.requests == []


def test_plugin_stderr_shows_only_a_redacted_first_line(api: KubeAPI, tmp_path: Path) -> None:
    err = ("error: refresh failed: Bearer abc.DEF-ghi token=s3cr3t-value jwt "
           "eyJhbGciOiJIUzI1NiJ9.eyJzdWIi.sig key AKIAIOSFODNN7EXAMPLE2\n"
           "second line: the-whole-secret-file\n")
    env = [{"name": "ERR", "value": err}, {"name": "CODE", "value": "3"}]
    kc = write(tmp_path, {}, {"exec": {"apiVersion": V1, "command": str(plugin(tmp_path)), "env": env}},
               api.url)
    with pytest.raises(Unreachable) as e:
        Client.load(str(kc), None).get(NAMESPACES.path())
    msg = str(e.value)
    assert "exit 3: error: refresh failed: Bearer [redacted]" in msg, msg
    for secret in ("abc.DEF-ghi", "s3cr3t", "eyJ", "AKIAIOSFODNN7EXAMPLE2", "second line", "whole-secret"):
        assert secret not in msg, msg


class _Headers(BaseHTTPRequestHandler):
    """Answers a NamespaceList to anyone; keeps each request's headers (in order, repeated
    ones too) in `seen`."""

    protocol_version = "HTTP/1.1"
    seen: list[list[tuple[str, str]]] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.seen.append(list(self.headers.items()))
        body = json.dumps({"kind": "NamespaceList", "items": []}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
        pass


@pytest.fixture
def headers_server() -> Iterator[str]:
    _Headers.seen = []
    with serve_http(ThreadingHTTPServer(("127.0.0.1", 0), _Headers)) as url:
        yield url.removeprefix("http://")


def test_impersonation_is_sent_as_client_go_sends_it(headers_server: str, tmp_path: Path) -> None:
    """One Impersonate-Group per group, one Impersonate-Extra-<key> per value with the key
    percent-encoded (client-go's headerKeyEscape), on every request; main sent none."""
    user = {"token": "t", "as": "jane", "as-uid": "1234", "as-groups": ["dev", "ops"],
            "as-user-extra": {"scopes.example.com/x y%": ["a", "b"]}}
    c = Client.load(str(write(tmp_path, {}, user, f"http://{headers_server}")), None)
    for _ in range(2):
        c.get(NAMESPACES.path())
    for seen in _Headers.seen:
        imp = [(k, v) for k, v in seen if k.lower().startswith("impersonate-")]
        extra = "Impersonate-Extra-scopes.example.com%2Fx%20y%25"
        want = [("Impersonate-User", "jane"), ("Impersonate-Uid", "1234"), ("Impersonate-Group", "dev"),
                ("Impersonate-Group", "ops"), (extra, "a"), (extra, "b")]
        assert imp == want, seen
    assert len(_Headers.seen) == 2


def test_user_info_in_the_server_url_is_a_credential_never_shown(headers_server: str, tmp_path: Path) -> None:
    """Sent as Basic auth when nothing else is (as Go's HTTP client does), never in `host`, an
    error, diagnose's output or the cluster entry `join` copies."""
    kc = write(tmp_path, {}, {}, f"http://admin:pa55w0rd-x@{headers_server}")
    c = Client.load(str(kc), None)
    c.get(NAMESPACES.path())
    assert ("Authorization", "Basic YWRtaW46cGE1NXcwcmQteA==") in _Headers.seen[0]
    assert c.host == f"http://{headers_server}"
    assert "pa55w0rd" not in json.dumps(admin_cluster(load(str(kc), None).server))
    refused = write(tmp_path, {}, {"token": "t"}, "http://admin:pa55w0rd-x@127.0.0.1:1", "refused")
    with pytest.raises(Unreachable) as e:
        Client.load(str(refused), None).get(NAMESPACES.path())
    assert "pa55w0rd" not in str(e.value) and "127.0.0.1:1" in str(e.value)
    bad = write(tmp_path, {}, {}, "htp://admin:pa55w0rd-x@host", "bad")
    with pytest.raises(KubeconfigError) as k:
        load(str(bad), None)
    assert "pa55w0rd" not in str(k.value)
    run = subprocess.run([sys.executable, "-m", "mcsdns", "diagnose", "--kubeconfig", str(refused)],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert "127.0.0.1:1" in run.stdout + run.stderr and "pa55w0rd" not in run.stdout + run.stderr, run.stdout
