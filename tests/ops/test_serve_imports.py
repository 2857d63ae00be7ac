"""What `mcsdns serve --kubeconfig` loads before its first answer: one process with a
Kubernetes source does not import the --workers relay (multiprocessing, pickle), the
--state-dir modules, the manifest source (and its inotify and YAML loader) or
ctypes.util (which runs `ldconfig` to find the C library); each loads where it is used."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
UNNEEDED = ("multiprocessing", "pickle", "ctypes.util", "mcsdns.sources.relay", "mcsdns.sources.files",
            "mcsdns.sources.manifest", "mcsdns.data.state", "mcsdns.publish.statekeeper")


def loaded(args: list[str], unneeded: tuple[str, ...] = UNNEEDED) -> set[str]:
    """Of `unneeded`, the modules loaded once `serve ARGS` has parsed its flags and built its
    one-process role (sources, pipeline, listeners), in a fresh interpreter."""
    code = ("import json, sys; from mcsdns import cli; from mcsdns.roles.single import SingleProcess; "
            f"SingleProcess(cli.config_from(cli.build_parser().parse_args({args!r}))); "
            f"print(json.dumps([m for m in {unneeded!r} if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         cwd=REPO, timeout=60).stdout
    return set(json.loads(out))


def test_one_process_with_a_kubeconfig_loads_only_what_it_uses(tmp_path: Path) -> None:
    kc = tmp_path / "kubeconfig"
    kc.write_text(json.dumps({"apiVersion": "v1", "kind": "Config", "current-context": "c",
                              "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
                              "users": [{"name": "u", "user": {}}],
                              "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    assert loaded(["serve", "--kubeconfig", str(kc), "--listen", "127.0.0.1:0"]) == set()
    state = loaded(["serve", "--kubeconfig", str(kc), "--listen", "127.0.0.1:0",
                    "--state-dir", str(tmp_path / "state")])
    assert state == {"mcsdns.data.state", "mcsdns.publish.statekeeper"}  # loaded when asked for


def test_in_a_pod_no_yaml_is_loaded() -> None:
    """The service account's credentials are files, not a kubeconfig: no YAML parser."""
    assert loaded(["serve", "--listen", "127.0.0.1:0"], ("yaml",)) == set()


def test_serve_asks_for_its_lists_before_it_imports_the_server(tmp_path: Path) -> None:
    """Stage 1 (ops/load.py): once the flags and the kubeconfig are read, the ServiceImport
    and EndpointSlice lists are asked for; the API server has both requests (first pages,
    from its watch cache) while asyncio, msgspec, uvloop and the server's modules are not
    imported yet: the server is set up while the API server prepares the lists."""
    from fakeapi import KubeAPI

    server = ("asyncio", "msgspec", "uvloop", "mcsdns.data.store", "mcsdns.sources.kube",
              "mcsdns.roles.single", "mcsdns.publish.pipeline", "mcsdns.transport.udp")
    with KubeAPI() as api:
        kc = api.write_kubeconfig(tmp_path / "kubeconfig")
        argv = ["serve", "--kubeconfig", str(kc)]
        code = ("import json, sys; from mcsdns import cli; "
                f"first = cli.ask_first(cli.build_parser().parse_args({argv!r})); "
                "from mcsdns.sources.kubefirst import PAGE, required; "
                "taken = [first.take(w.path, w.selector, PAGE, 'application/json') is not None "
                "for w in required([], first.discovered())]; "
                f"print(json.dumps([taken, [m for m in {server!r} if m in sys.modules]]))")
        out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                             cwd=REPO, timeout=60).stdout
        lists = sorted(u.split("?")[0] for _, u in api.requests if "resourceVersion=0" in u)
    assert json.loads(out) == [[True, True], []]
    assert lists == ["/apis/discovery.k8s.io/v1/endpointslices",
                     "/apis/multicluster.x-k8s.io/v1beta1/serviceimports"]
