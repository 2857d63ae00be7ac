"""Loading a kubeconfig as kubectl does (mcsdns/kube/apiclient/kubeconfig.py) and keeping its
credentials fresh (credentials.py): several files in $KUBECONFIG merged with the first
file winning, paths relative to their file, a rotated token file or an expiring exec
credential picked up without a restart, and every bad kubeconfig one clear line, the
same in every command."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakeapi import KubeAPI
from support.realk8s import RealK8s

from mcsdns.kube.apiclient import kubeconfig
from mcsdns.kube.apiclient.client import Client
from mcsdns.kube.apiclient.errors import Rejected
from mcsdns.kube.apiclient.kubeconfig import KubeconfigError
from mcsdns.kube.names import PREFERRED
from mcsdns.kube.resources import NAMESPACES

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def api() -> Iterator[KubeAPI]:
    with KubeAPI() as a:
        yield a


def config(clusters: dict[str, str], users: dict[str, dict[str, Any]], contexts: dict[str, tuple[str, str]],
           current: str = "") -> str:
    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": current,
        "clusters": [{"name": n, "cluster": {"server": s}} for n, s in clusters.items()],
        "users": [{"name": n, "user": u} for n, u in users.items()],
        "contexts": [{"name": n, "context": {"cluster": c, "user": u}} for n, (c, u) in contexts.items()]})


def test_several_files_merge_as_kubectl_merges_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text(config({"one": "https://a.example:6443"}, {"u": {"token": "from-a"}},
                        {"ctx-a": ("two", "u")}, current="ctx-a"))
    b.write_text(config({"one": "https://b.example:6443", "two": "https://two.example:6443"},
                        {"u": {"token": "from-b"}}, {"ctx-b": ("one", "u")}, current="ctx-b"))
    monkeypatch.setenv("KUBECONFIG", f"{a}{os.pathsep}{tmp_path / 'missing'}{os.pathsep}{b}")
    cfg = kubeconfig.load(None, None)  # the current context of the first file that names one
    assert (cfg.server.url, cfg.identity.token) == ("https://two.example:6443", "from-a")
    other = kubeconfig.load(None, "ctx-b")  # cluster "one" as the first file defines it
    assert (other.server.url, other.identity.token) == ("https://a.example:6443", "from-a")
    kubectl = shutil.which("kubectl") or str(Path(sys.executable).parent / "kubectl")
    if os.access(kubectl, os.X_OK):  # the same answers as kubectl's own merge
        for ctx, want in ((None, cfg.server.url), ("ctx-b", other.server.url)):
            args = [kubectl, "config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}"]
            got = subprocess.run(args + ([f"--context={ctx}"] if ctx else []), capture_output=True,
                                 text=True, check=True, env={**os.environ}).stdout
            assert got == want


def test_paths_are_relative_to_their_file(api: KubeAPI, tmp_path: Path) -> None:
    api.admin_tokens = {"secret-1"}
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "token").write_text("secret-1\n")
    kc = tmp_path / "conf" / "kc"
    kc.write_text(config({"c": api.url}, {"u": {"tokenFile": "token"}}, {"c": ("c", "u")}, "c"))
    c = Client.load(str(kc), None)
    assert c.get(NAMESPACES.path())["kind"] == "NamespaceList"
    api.admin_tokens = {"other"}
    with pytest.raises(Rejected) as e:
        c.get(NAMESPACES.path())
    assert e.value.status == 401


def test_a_rotated_token_file_is_read_again(api: KubeAPI, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("old")
    api.admin_tokens = {"old"}
    kc = tmp_path / "kc"
    kc.write_text(config({"c": api.url}, {"u": {"tokenFile": str(token)}}, {"c": ("c", "u")}, "c"))
    c = Client.load(str(kc), None)
    c.get(NAMESPACES.path())
    # the kubelet (or a Secret update) rotates the file; the old token expires later
    token.write_text("new")
    api.admin_tokens = {"old", "new"}
    time.sleep(1.2)  # the file is looked at again at most once a second
    api.admin_tokens = {"new"}
    c.get(NAMESPACES.path())
    # the server moves first: one 401, and the next request reads the file again
    api.admin_tokens = {"newer"}
    with pytest.raises(Rejected):
        c.get(NAMESPACES.path())
    token.write_text("newer")
    c.get(NAMESPACES.path())
    assert c.counts[("GET", "401")] == 1


def test_exec_plugin_credentials_are_renewed_before_they_expire(api: KubeAPI, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    plugin = tmp_path / "plugin"
    plugin.write_text(f"""#!{sys.executable}
import json, os, sys, time
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
assert info["kind"] == "ExecCredential" and info["spec"]["interactive"] is False
with open({str(runs)!r}, "a") as f:
    f.write(os.environ["GREETING"] + "\\n")
n = sum(1 for _ in open({str(runs)!r}))
stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 12))
print(json.dumps({{"apiVersion": info["apiVersion"], "kind": "ExecCredential",
                  "status": {{"token": f"t{{n}}", "expirationTimestamp": stamp}}}}))
""")
    plugin.chmod(0o755)
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "./plugin",
                     "env": [{"name": "GREETING", "value": "hi"}], "interactiveMode": "Never"}}
    kc = tmp_path / "kc"
    kc.write_text(config({"c": api.url}, {"u": user}, {"c": ("c", "u")}, "c"))
    api.admin_tokens = {"t1"}
    c = Client.load(str(kc), None)
    assert not runs.exists()  # the plugin runs at the first request, not at load
    c.get(NAMESPACES.path())
    c.get(NAMESPACES.path())
    assert runs.read_text() == "hi\n"  # cached while valid
    time.sleep(2.5)  # 12 s validity, renewed 10 s before it ends
    api.admin_tokens = {"t2"}
    c.get(NAMESPACES.path())
    assert runs.read_text() == "hi\nhi\n"


BAD = {
    "passwd": ("root:x:0:0:root:/root:/bin/bash\n", "not a kubeconfig (a str, not a mapping"),
    "yaml": ("clusters: [\n", "not YAML: "),
    "no-context": (config({"c": "https://x:1"}, {}, {}), "no current-context; name one with --context"),
    "bad-server": (config({"c": "x:1"}, {}, {"c": ("c", "")}, "c"),
                   "cluster server 'x:1' is not an http(s) URL"),
    "no-cluster": (config({}, {}, {"c": ("gone", "")}, "c"), "no cluster 'gone'"),
    "bad-ca": (json.dumps({"current-context": "c", "contexts": [{"name": "c", "context": {"cluster": "c"}}],
                           "clusters": [{"name": "c", "cluster": {"server": "https://x:1",
                                                                  "certificate-authority": "nope.pem"}}]}),
               "cannot read certificate-authority "),
    "provider": (config({"c": "https://x:1"}, {"u": {"auth-provider": {"name": "gcp"}}},
                        {"c": ("c", "u")}, "c"), "auth-provider gcp is not supported"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_every_bad_kubeconfig_is_one_line_naming_the_file(case: str, tmp_path: Path) -> None:
    text, want = BAD[case]
    kc = tmp_path / "kc"
    kc.write_text(text)
    with pytest.raises(KubeconfigError) as e:
        Client.load(str(kc), None)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"kubeconfig {kc}") and want in msg, msg


def test_every_command_says_it_the_same_way(tmp_path: Path) -> None:
    """serve, controller and diagnose: exit 2 and one line, no traceback."""
    lines = {}
    for cmd in (["serve", "--kubeconfig", "/etc/passwd"], ["controller", "--cluster", "west=/etc/passwd"],
                ["diagnose", "--kubeconfig", "/etc/passwd"]):
        run = subprocess.run([sys.executable, "-m", "mcsdns", *cmd], capture_output=True, text=True,
                             timeout=60, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
        err = run.stderr.strip().splitlines()
        assert run.returncode == 2 and len(err) == 1 and "Traceback" not in run.stderr, (cmd, run.stderr)
        lines[cmd[0]] = err[0]
    reason = "cannot load kubeconfig: kubeconfig /etc/passwd: not a kubeconfig (a str, not a mapping"
    assert all(reason in line for line in lines.values()), lines
    assert lines["controller"].startswith("mcsdns: --cluster west=/etc/passwd: " + reason)
    assert lines["serve"].startswith("mcsdns: --kubeconfig /etc/passwd: " + reason)


def test_in_cluster_identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "token").write_text("pod-token")
    (tmp_path / "namespace").write_text("mcsdns-system")
    (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    cfg = kubeconfig.service_account(tmp_path)
    assert cfg.server.url == "https://[fd00::1]:443" and cfg.namespace == "mcsdns-system"
    assert cfg.identity.token_file == str(tmp_path / "token")
    assert cfg.server.ca == "-----BEGIN CERTIFICATE-----\n"
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    with pytest.raises(KubeconfigError):
        kubeconfig.service_account(tmp_path)


def test_real_server_with_token_and_with_client_certificate(real_k8s: RealK8s) -> None:
    """TLS to a real kube-apiserver: its CA, a bearer token, and a client certificate."""
    for ctx in (None, f"{real_k8s.name}-cert"):
        c = Client.load(str(real_k8s.kubeconfig), ctx)
        assert c.preferred("multicluster.x-k8s.io", PREFERRED) == "v1beta1"
        assert c.counts[("GET", "200")] >= 1
        c.close()
