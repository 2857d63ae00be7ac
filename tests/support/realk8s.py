"""A real control plane (etcd + kube-apiserver) for tests that must hold against the real
thing, not only against the test API server (`tests/fakeapi/`).

The control plane comes from `realk8s.sh`, named by the environment variable
`MCSDNS_REALK8S` (its path; `MCSDNS_KUBE_APISERVER` may name the kube-apiserver binary it
runs); without it the tests that ask for one skip, saying so. The project's CRDs
(deploy/crds) are installed. One control plane serves the whole pytest
session (`real_k8s` fixture, in conftest.py); each test works in namespaces of its own.

    with RealK8s.up("name") as k8s:      # or the session fixture `real_k8s`
        k8s.kubeconfig                   # admin kubeconfig (TLS, bearer token)
        k8s.request("GET", "/api/v1/namespaces")   # (status, headers, body bytes)
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import tempfile
import urllib.request
import uuid
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.error import HTTPError

import pytest

ENV = "MCSDNS_REALK8S"
APISERVER_ENV = "MCSDNS_KUBE_APISERVER"
CRDS = Path(__file__).resolve().parents[2] / "deploy" / "crds"
SKIP_REASON = (f"no real API server: set {ENV} to the path of realk8s.sh (etcd and kubectl on PATH) "
               "to run this test against a real kube-apiserver")


def crd_folder(home: Path) -> Path:
    """`home`/crds holding the project's CRD manifests alone (realk8s.sh applies every
    manifest of the folder it is given)."""
    crds = home / "crds"
    crds.mkdir(parents=True, exist_ok=True)
    for f in CRDS.glob("*_*.yaml"):
        shutil.copy(f, crds)
    return crds


def bench_place(prog: str, realk8s: str | None, prefix: str) -> tuple[Path, Path, Path] | None:
    """For a benchmark: (a new temporary folder, the realk8s home, the CRD folder); None,
    said on stdout, when `realk8s` (its --realk8s or $MCSDNS_REALK8S) names no realk8s.sh."""
    if not realk8s or not Path(realk8s).is_file():
        print(f"{prog}: no real API server: set {ENV} (or --realk8s) to the path of realk8s.sh; skipped")
        return None
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    return tmp, Path(os.environ.get("REALK8S_HOME") or tmp / "realk8s"), crd_folder(tmp)


def script() -> str | None:
    """The realk8s.sh named by MCSDNS_REALK8S, or None."""
    path = os.environ.get(ENV, "")
    return path if path and os.access(path, os.X_OK) else None


# what realk8s.sh says when a start failed for a passing reason, which a second start does not
# meet: the port it picked was taken meanwhile (it picks in the ephemeral range, and a client
# socket may take it before etcd or the API server binds it); or it looked for the process it
# had just forked before that one ran (a busy machine): then the log it shows is not there yet
TRANSIENT = ("address already in use", ".log' for reading: No such file")
TRIES = 4


def run_up(sh: str, name: str, env: Mapping[str, str]) -> Path:
    """`realk8s.sh up name`: its kubeconfig (RuntimeError if it fails). A start that failed for
    a passing reason (TRANSIENT) is run again; realk8s.sh then stops what the last one started
    and picks a port anew. A start that failed for good is stopped too."""
    for _ in range(TRIES):
        out = subprocess.run([sh, "up", name], env=dict(env), capture_output=True, text=True, timeout=180)
        if out.returncode == 0:
            return Path(out.stdout.strip().splitlines()[-1])
        if not any(t in out.stderr for t in TRANSIENT):
            break
    subprocess.run([sh, "down", name], env=dict(env), capture_output=True, timeout=60)
    raise RuntimeError(f"realk8s.sh up {name} failed: {out.stderr[-2000:]}")


class RealK8s:
    """One running control plane: its admin kubeconfig, server URL, token and CA."""

    def __init__(self, name: str, home: Path, kubeconfig: Path) -> None:
        self.name, self.home, self.kubeconfig = name, home, kubeconfig
        self.shared = False  # home holds other control planes too (up_many): down removes only its own
        cfg = kubeconfig.read_text()
        self.url = next(line.split("server:", 1)[1].strip() for line in cfg.splitlines() if "server:" in line)
        self.token = (kubeconfig.parent / "admin.token").read_text().strip()
        self.ssl = ssl.create_default_context(cafile=str(kubeconfig.parent / "pki" / "ca.crt"))

    @classmethod
    def up(cls, name: str, home: Path | None = None, crds: Path | None = None) -> RealK8s:
        """Start control plane `name` with the project's CRDs (RuntimeError if it fails)."""
        sh = script()
        if sh is None:
            raise RuntimeError(SKIP_REASON)
        home = home or Path(tempfile.mkdtemp(prefix="mcsdns-realk8s-"))
        env = dict(os.environ, REALK8S_HOME=str(home), REALK8S_CRDS=str(crds or crd_folder(home)))
        if os.environ.get(APISERVER_ENV):  # a kube-apiserver binary of one's own
            env["KUBE_APISERVER"] = os.environ[APISERVER_ENV]
        return cls(name, home, run_up(sh, name, env))

    @classmethod
    def up_many(cls, names: Sequence[str], home: Path) -> list[RealK8s]:
        """Start control planes `names` at once in one home, where realk8s.sh picks their ports
        under its lock (a set-up's cost is the slowest start, not the sum)."""
        crds = crd_folder(home)
        with ThreadPoolExecutor(len(names)) as pool:
            started = [pool.submit(cls.up, n, home, crds) for n in names]
        out = [f.result() for f in started if f.exception() is None]
        for k in out:
            k.shared = True
        failed = [e for f in started if (e := f.exception()) is not None]
        if failed:
            for k in out:
                k.down()
            raise failed[0]
        return out

    def down(self) -> None:
        """Stop the control plane and delete its data."""
        sh = script()
        if sh is not None:
            env = dict(os.environ, REALK8S_HOME=str(self.home))
            subprocess.run([sh, "down", "--purge", self.name], env=env, capture_output=True, timeout=60)
        shutil.rmtree(self.home / self.name if self.shared else self.home, ignore_errors=True)

    def __enter__(self) -> RealK8s:
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def request(self, method: str, path: str, body: Any = None, headers: Mapping[str, str] | None = None,
                timeout: float = 30) -> tuple[int, dict[str, str], bytes]:
        """One request as the admin: (status, headers, body), error answers included."""
        data = json.dumps(body).encode() if body is not None and not isinstance(body, bytes) else body
        h = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if data is not None:
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, context=self.ssl, timeout=timeout) as r:
                return r.status, dict(r.headers.items()), r.read()
        except HTTPError as e:
            return e.code, dict(e.headers.items()), e.read()

    def namespace(self, prefix: str) -> str:
        """A new namespace of this control plane (a fresh name each call)."""
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.json("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                 "metadata": {"name": name}})
        return name

    def unexport(self, namespace: str) -> None:
        """Delete the ServiceExports, ServiceImports, EndpointSlices and Services of `namespace`
        (what a controller reads and writes there): a later test's controller on a shared control
        plane then finds no objects of another writer to leave alone for --writer-grace (30 s)."""
        for path in (f"/apis/multicluster.x-k8s.io/v1beta1/namespaces/{namespace}/serviceexports",
                     f"/apis/multicluster.x-k8s.io/v1beta1/namespaces/{namespace}/serviceimports",
                     f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices",
                     f"/api/v1/namespaces/{namespace}/services"):
            for item in self.json("GET", path)["items"]:
                self.request("DELETE", f"{path}/{item['metadata']['name']}")

    def token_for(self, namespace: str, account: str, create: bool = True) -> Path:
        """A kubeconfig for ServiceAccount `account` of `namespace` (`create`: a new one, with
        no permissions granted)."""
        if create:
            self.json("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts",
                      {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}})
        tok = self.json("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
                        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}})
        lines = self.kubeconfig.read_text().replace(self.token, tok["status"]["token"])
        path = self.home / f"kubeconfig-{namespace}-{account}"
        path.write_text(lines)
        return path

    def json(self, method: str, path: str, body: Any = None) -> Any:
        """One request's JSON answer (AssertionError on an error answer)."""
        code, _, data = self.request(method, path, body)
        assert 200 <= code < 300, f"{method} {path}: {code} {data[:500]!r}"
        return json.loads(data)


def control_plane(prefix: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealK8s]:
    """A fixture's real control plane named `prefix`-<pid>, down when the fixture ends (skips
    when MCSDNS_REALK8S is not set)."""
    if script() is None:
        pytest.skip(SKIP_REASON)
    k8s = RealK8s.up(f"{prefix}-{os.getpid()}", tmp_path_factory.mktemp(prefix))
    try:
        yield k8s
    finally:
        k8s.down()


@pytest.fixture(scope="session")
def real_k8s(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealK8s]:
    """One real control plane for the whole session."""
    yield from control_plane("mcsdns-test", tmp_path_factory)
