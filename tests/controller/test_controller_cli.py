"""`mcsdns controller` start-up: member cluster IDs and bad flags (exit code 2, clear message)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakeapi import KubeAPI
from support.controller_env import Kube
from support.helpers import REPO
from support.ports import free_port


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[KubeAPI, Path]]:
    k = KubeAPI()
    k.start()
    yield k, k.write_kubeconfig(tmp_path / "a.kubeconfig", "a")
    k.stop()


def controller(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mcsdns.controller", "--once", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=30)


def test_missing_cluster_property_is_an_error(api: tuple[KubeAPI, Path]) -> None:
    _, kc = api
    r = controller("--cluster", f"a={kc}")
    assert r.returncode == 2
    assert "no ClusterProperty cluster.clusterset.k8s.io or id.k8s.io" in r.stderr
    assert "--cluster-id a=ID" in r.stderr


def test_invalid_cluster_property_is_an_error(api: tuple[KubeAPI, Path]) -> None:
    _, kc = api
    Kube(kc).cluster_id("Not_A_Label")
    r = controller("--cluster", f"a={kc}")
    assert r.returncode == 2 and "'Not_A_Label' is not a valid cluster ID" in r.stderr


def test_id_k8s_io_is_accepted_and_explicit_id_is_checked(api: tuple[KubeAPI, Path]) -> None:
    _, kc = api
    Kube(kc).cluster_id("east.set1", name="id.k8s.io")
    r = controller("--cluster", f"a={kc}", "--log-level", "info")
    assert r.returncode == 0, r.stderr
    assert "cluster a: ID east.set1" in r.stderr
    r = controller("--cluster", f"a={kc}", "--cluster-id", "a=a.b.c")
    assert r.returncode == 2 and "'a.b.c' is not a valid cluster ID" in r.stderr
    r = controller("--cluster", f"a={kc}", "--cluster-id", "zz=east")
    assert r.returncode == 2 and "NAME one of ['a']" in r.stderr


def test_bad_kubeconfig_and_no_cluster(tmp_path: Path) -> None:
    r = controller("--cluster", f"a={tmp_path / 'nope'}")
    assert r.returncode == 2 and "cannot load kubeconfig" in r.stderr
    r = controller()
    assert r.returncode == 2 and "at least one --cluster" in r.stderr
    r = controller("--cluster", "a=x", "--clusterset-cidr", "10.0.0.0/33")
    assert r.returncode == 2 and "--clusterset-cidr 10.0.0.0/33: expected an address or CIDR" in r.stderr


def test_context_is_taken_from_after_the_at_sign(api: tuple[KubeAPI, Path], tmp_path: Path) -> None:
    k, _ = api
    Kube(k.write_kubeconfig(tmp_path / "live.kubeconfig", "live")).cluster_id("east")
    dead = free_port()
    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "dead",
           "clusters": [{"name": "dead", "cluster": {"server": f"http://127.0.0.1:{dead}"}},
                        {"name": "live", "cluster": {"server": k.url}}],
           "users": [{"name": "u", "user": {}}],
           "contexts": [{"name": "dead", "context": {"cluster": "dead", "user": "u"}},
                        {"name": "live", "context": {"cluster": "live", "user": "u"}}]}
    kc = tmp_path / "two.kubeconfig"
    kc.write_text(json.dumps(cfg))
    r = controller("--cluster", f"a={kc}@live")
    assert r.returncode == 0, r.stderr
    assert "cluster a: ID east" in r.stderr and "@live" in r.stderr
    r = controller("--cluster", f"a={kc}@nope")
    assert r.returncode == 2 and "cannot load kubeconfig" in r.stderr
