"""A member's API: `MemberClient`, the requests a reconcile's writes make (this `Member`, or a
fake in unit tests), and `Member`, one API client (`kube.apiclient.client.Client`) with the MCS
API version the member serves, its cluster ID and the counts of its writes, tried and landed
(answered 2xx). Its requests raise the errors of `kube.apiclient.errors`."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ...kube.apiclient.client import Client
from ...kube.apiclient.errors import VERBS, Request, Unreachable
from ...kube.clusterid import read_cluster_id
from ...kube.config import connect, parse_cluster
from ...kube.names import MCS_GROUP, PREFERRED
from ...kube.resources import MCS

log = logging.getLogger("mcsdns.controller")


def timed_out(e: BaseException) -> bool:
    """Whether a request got no answer in time (a 504: the API server's own timeout)."""
    return (isinstance(e, Unreachable) and e.status == 504) or isinstance(e, TimeoutError) or \
        isinstance(e.__cause__, TimeoutError)


class MemberClient(Protocol):
    """The API of one member cluster, as the writes use it."""

    name: str
    cluster_id: str | None
    mcs_version: str | None

    def mcs_api_version(self) -> str: ...

    def request(self, method: str, path: str, body: Any = None,
                query: dict[str, str] | None = None) -> Any: ...


@dataclass
class Member:
    """A member cluster, reached through a kubeconfig (and context)."""

    name: str
    kubeconfig: str
    context: str | None = None
    cluster_id: str | None = None
    client: Client | None = None
    mcs_version: str | None = None
    writes: int = 0  # attempted
    write_counts: Counter[tuple[str, str]] = field(default_factory=Counter)  # attempted, by (resource, verb)
    landed_counts: Counter[tuple[str, str]] = field(default_factory=Counter)  # answered 2xx, by the same
    on_timeout: Callable[[BaseException], None] | None = None  # a write got no answer in time
    warned: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    origin: str = ""  # where it was given, for errors (default: its --cluster flag)
    member_file: bool = False  # from --members-dir: data only (kube.apiclient.memberfile)
    allow_exec: bool = False  # ... but for an exec plugin (--members-allow-exec)

    @classmethod
    def parse(cls, spec: str) -> Member:
        """NAME=KUBECONFIG[@CONTEXT]."""
        name, path, ctx = parse_cluster(spec)
        return cls(name=name, kubeconfig=path, context=ctx)

    def connect(self, pool: int = 32) -> None:
        """Build the API client from the kubeconfig (no request is made, no plugin run), with up
        to `pool` kept connections (the reconcile workers' writes and the watches share them)."""
        self.client = connect(self.kubeconfig, self.context, pool=pool, member=self.name, origin=self.origin,
                              data_only=self.member_file, allow_exec=self.allow_exec)

    def close(self) -> None:
        """Drop the kept connections."""
        self._client().close()

    def _client(self) -> Client:
        if self.client is None:
            raise RuntimeError(f"cluster {self.name}: not connected")
        return self.client

    # --- requests: JSON in and out, the errors of kube.apiclient.errors ----------------------------
    def request(self, method: str, path: str, body: Any = None,
                query: dict[str, str] | None = None) -> Any:
        """One API call; returns the decoded JSON body. Writes are counted when tried and when
        they land; a write's timeout is told to `on_timeout`."""
        landed = False
        try:
            out = self._client().request(method, path, body, query)
            landed = True
            return out
        except Exception as e:
            if method in VERBS and self.on_timeout is not None and timed_out(e):
                self.on_timeout(e)
            raise
        finally:
            if method in VERBS:
                req = Request.of(path, method=method)
                what = (req.resource if req else path, VERBS[method])
                with self.lock:
                    self.writes += 1
                    self.write_counts[what] += 1
                    if landed:
                        self.landed_counts[what] += 1

    def get(self, path: str, query: dict[str, str] | None = None) -> Any:
        return self.request("GET", path, query=query)

    def items(self, path: str, selector: str | None = None) -> list[dict[str, Any]]:
        """A list call's items (all pages)."""
        return self._client().list(path, selector)

    # --- discovery -----------------------------------------------------------------
    def group_version(self, group: str, prefer: tuple[str, ...] = PREFERRED) -> str | None:
        """The preferred served version of an API group, None when not served."""
        return self._client().preferred(group, prefer)

    def discover(self) -> None:
        """Find the MCS API version (v1beta1 preferred)."""
        self.mcs_version = self.group_version(MCS_GROUP)
        if self.mcs_version is None and not self.warned:
            self.warned = True
            log.warning("cluster %s does not serve %s (ServiceExport/ServiceImport CRDs missing)",
                        self.name, MCS_GROUP)

    def read_cluster_id(self) -> str:
        """The cluster ID from the about.k8s.io ClusterProperty; ConfigError naming the member."""
        return read_cluster_id(self._client(), f"cluster {self.name}", f"--cluster-id {self.name}=ID")

    def mcs_path(self, plural: str, namespace: str | None = None, name: str | None = None) -> str:
        return MCS[plural].path(namespace, name, version=self.mcs_version)

    def mcs_api_version(self) -> str:
        return f"{MCS_GROUP}/{self.mcs_version}"
