"""Ways to put one spec file's fixtures in front of the server under test.

Each loader has `load(objects)` (replace whatever it loaded before with these
objects) and `close()` (remove everything it created).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import yaml

FIXTURE_FILE = "mcs-conformance.yaml"
MCS_GROUP, ABOUT_GROUP = "multicluster.x-k8s.io", "about.k8s.io"


class Loader(Protocol):
    """Puts a vector's objects where the server under test reads them."""

    def load(self, objects: Sequence[dict[str, Any]]) -> None: ...

    def close(self) -> None: ...


class NoLoader:
    """The fixtures are already in place (one spec file at a time, loaded by hand)."""

    def load(self, objects: Sequence[dict[str, Any]]) -> None:
        pass

    def close(self) -> None:
        pass


class ManifestLoader:
    """Writes the objects to one file in a directory a server watches (`mcsdns serve
    --manifests DIR`); a new set replaces the file atomically."""

    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / FIXTURE_FILE

    def load(self, objects: Sequence[dict[str, Any]]) -> None:
        tmp = self.dir / f".{FIXTURE_FILE}.tmp"
        tmp.write_text(yaml.safe_dump_all(list(objects), sort_keys=False), encoding="utf-8")
        os.replace(tmp, self.path)

    def close(self) -> None:
        self.path.unlink(missing_ok=True)


def _namespaces(objects: Sequence[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(ns for o in objects if (ns := (o.get("metadata") or {}).get("namespace"))))


def _split_api_version(obj: dict[str, Any]) -> tuple[str, str]:
    group, _, version = str(obj["apiVersion"]).rpartition("/")
    return group, version


class KubeLoader:
    """Creates (or replaces) the objects through the Kubernetes API with the official Python
    client: ServiceImport and ClusterProperty as custom objects, EndpointSlice through
    discovery.k8s.io/v1. Missing namespaces are created, and deleted again on close."""

    def __init__(self, kubeconfig: str | None, context: str | None) -> None:
        from kubernetes import client, config

        api = config.new_client_from_config(config_file=kubeconfig, context=context)  # type: ignore[no-untyped-call]
        self.core = client.CoreV1Api(api)
        self.discovery = client.DiscoveryV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.loaded: list[dict[str, Any]] = []
        self.created_ns: list[str] = []

    @staticmethod
    def _missing(e: Exception) -> bool:
        return getattr(e, "status", None) == 404

    def _ensure_namespace(self, ns: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.core.read_namespace(ns)
        except ApiException as e:
            if not self._missing(e):
                raise
            try:
                from kubernetes import client

                self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
            except ApiException as e2:
                if e2.status != 409:
                    raise
            self.created_ns.append(ns)

    def _ops(self, obj: dict[str, Any]) -> tuple[Any, Any, Any, Any]:
        """create(body), read(), replace(body), delete() for one object."""
        kind, meta = obj["kind"], obj["metadata"]
        name, ns = meta["name"], meta.get("namespace", "default")
        group, version = _split_api_version(obj)
        if kind == "EndpointSlice":
            d = self.discovery
            return (lambda b: d.create_namespaced_endpoint_slice(ns, b),
                    lambda: d.read_namespaced_endpoint_slice(name, ns),
                    lambda b: d.replace_namespaced_endpoint_slice(name, ns, b),
                    lambda: d.delete_namespaced_endpoint_slice(name, ns))
        c = self.custom
        if kind == "ServiceImport":
            args = (group, version, ns, "serviceimports")
            return (lambda b: c.create_namespaced_custom_object(*args, b),
                    lambda: c.get_namespaced_custom_object(*args, name),
                    lambda b: c.replace_namespaced_custom_object(*args, name, b),
                    lambda: c.delete_namespaced_custom_object(*args, name))
        if kind == "ClusterProperty":
            cargs = (group, version, "clusterproperties")
            return (lambda b: c.create_cluster_custom_object(*cargs, b),
                    lambda: c.get_cluster_custom_object(*cargs, name),
                    lambda b: c.replace_cluster_custom_object(*cargs, name, b),
                    lambda: c.delete_cluster_custom_object(*cargs, name))
        raise ValueError(f"cannot load a {kind}")

    def _apply(self, obj: dict[str, Any]) -> None:
        from kubernetes.client.exceptions import ApiException

        create, read, replace, _ = self._ops(obj)
        try:
            create(obj)
        except ApiException as e:
            if e.status != 409:
                raise
            cur = read()
            rv = (cur.metadata.resource_version if hasattr(cur, "metadata")
                  else cur["metadata"]["resourceVersion"])
            body = dict(obj, metadata=dict(obj["metadata"], resourceVersion=rv))
            replace(body)

    def _delete(self, obj: dict[str, Any]) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self._ops(obj)[3]()
        except ApiException as e:
            if not self._missing(e):
                raise

    def load(self, objects: Sequence[dict[str, Any]]) -> None:
        for obj in reversed(self.loaded):
            self._delete(obj)
        self.loaded = []
        for ns in _namespaces(objects):
            self._ensure_namespace(ns)
        for obj in objects:
            self._apply(obj)
            self.loaded.append(obj)

    def close(self) -> None:
        for obj in reversed(self.loaded):
            self._delete(obj)
        self.loaded = []
        for ns in self.created_ns:
            try:
                self.core.delete_namespace(ns)
            except Exception:  # noqa: BLE001 - best effort cleanup
                pass
        self.created_ns = []


class KubectlLoader:
    """`kubectl apply -f` / `kubectl delete -f` with the given kubeconfig and context;
    missing namespaces are created first and deleted on close."""

    def __init__(self, kubeconfig: str | None, context: str | None, kubectl: str = "kubectl",
                 apply_flags: Sequence[str] = ()) -> None:
        self.base = [kubectl]
        self.apply_flags = list(apply_flags)
        if kubeconfig:
            self.base += ["--kubeconfig", kubeconfig]
        if context:
            self.base += ["--context", context]
        self.tmp = tempfile.TemporaryDirectory(prefix="mcs-conformance-")
        self.file = Path(self.tmp.name) / FIXTURE_FILE
        self.loaded = False
        self.created_ns: list[str] = []

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.base, *args], capture_output=True, text=True, timeout=120)

    def _unload(self) -> None:
        if self.loaded:
            self._run("delete", "-f", str(self.file), "--ignore-not-found", "--wait=false")
            self.loaded = False

    def load(self, objects: Sequence[dict[str, Any]]) -> None:
        self._unload()
        for ns in _namespaces(objects):
            if self._run("get", "namespace", ns, "-o", "name").returncode != 0:
                p = self._run("create", "namespace", ns)
                if p.returncode != 0 and "AlreadyExists" not in p.stderr:
                    raise RuntimeError(f"kubectl create namespace {ns}: {p.stderr.strip()}")
                self.created_ns.append(ns)
        self.file.write_text(yaml.safe_dump_all(list(objects), sort_keys=False), encoding="utf-8")
        p = self._run("apply", *self.apply_flags, "-f", str(self.file))
        if p.returncode != 0:
            raise RuntimeError(f"kubectl apply: {p.stderr.strip()}")
        self.loaded = True

    def close(self) -> None:
        self._unload()
        for ns in self.created_ns:
            self._run("delete", "namespace", ns, "--ignore-not-found", "--wait=false")
        self.created_ns = []
        self.tmp.cleanup()
