"""The contract every controller kind fulfils, and what its desired state is built from.

A kind (one class in its own module) says where its objects live (`api`, a
`kube.resources.Resource`, so `api_version` and `path`), what the controller reads of
others' objects (`reads`), what is compared (`view`: two objects with the same view need
no write), how our desired object is merged into an existing one (`merge`: others'
metadata kept) and which objects are ours (`ours`). `engine.Engine` applies it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar

from ..kube.apiclient.keys import Key
from ..kube.resources import Resource
from .exports import ExportState, is_ours
from .member.client import MemberClient
from .merge import Merged

Obj = dict[str, Any]
Reads = Mapping[str, tuple[str, ...] | None]  # resource -> fields read of others' objects; None: all


class Kind(Enum):
    """The kinds the controller writes."""

    SERVICE_IMPORT = "ServiceImport"
    SERVICE = "Service"  # derived Services
    ENDPOINT_SLICE = "EndpointSlice"
    SERVICE_EXPORT = "ServiceExport"  # its status only


class Verb(Enum):
    """The writes the engine makes."""

    CREATE = "create"
    UPDATE = "update"
    STATUS = "status"  # the status subresource
    DELETE = "delete"


def label(kind: Kind, verb: Verb) -> str:
    """How a write is named in logs and in the export's Ready condition."""
    if verb is Verb.DELETE:
        return f"delete {kind.value}"
    return f"{kind.value} status" if verb is Verb.STATUS else kind.value


def drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def port_view(p: dict[str, Any]) -> dict[str, Any]:
    """The one port normaliser: a Service, ServiceImport or EndpointSlice port as compared."""
    return drop_none({"name": p.get("name") or "", "protocol": p.get("protocol") or "TCP",
                      "port": p.get("port"), "appProtocol": p.get("appProtocol") or None})


PORT_READS = ("name", "protocol", "port", "appProtocol")  # what `port_view` reads


@dataclass
class Target:
    """What one member should hold for one service: the inputs of every kind's desired
    object, the ClusterSetIP strategy's contributions, and our ServiceImport once written."""

    merged: Merged
    exports: list[ExportState]
    ips: tuple[list[str], list[str]] | None = None  # the import's (ips, ipFamilies)
    annotations: dict[str, str] = field(default_factory=dict)  # on the ServiceImport
    slice_labels: dict[str, str] = field(default_factory=dict)  # on the imported EndpointSlices
    service: str | None = None  # the name of the Service this import gets here
    blocked: Obj | None = None  # someone else's object where that Service would be
    service_import: Obj | None = None  # ours: read, then as written (its uid owns the rest)


class Contract(ABC):
    """One kind's path, view, merge and ownership (see the module docstring)."""

    kind: ClassVar[Kind]
    api: ClassVar[Resource]  # where its objects live (kube.resources)
    reads: ClassVar[Reads]
    # Fields of a desired object the view deliberately does not compare (a path and all below it).
    unviewed: ClassVar[tuple[str, ...]] = ("apiVersion", "kind", "metadata.name", "metadata.namespace")

    @property
    def resource(self) -> str:
        """The plural, also the informer cache our writes go into."""
        return self.api.plural

    def api_version(self, m: MemberClient) -> str:
        """Its objects' apiVersion: fixed, or the MCS version the member serves."""
        return self.api.api_version() if self.api.version else m.mcs_api_version()

    def path(self, m: MemberClient, namespace: str, name: str | None = None) -> str:
        return self.api.path(namespace, name, version=self.api_version(m).rpartition("/")[2])

    @abstractmethod
    def view(self, obj: Obj) -> Any:
        """What is compared: equal views, no write."""

    @abstractmethod
    def merge(self, have: Obj, want: Obj) -> Obj:
        """The update body: `want` over `have`, keeping others' metadata."""

    def ours(self, obj: Obj) -> bool:
        return is_ours(obj)

    def describe(self, key: Key, k: Key, verb: Verb) -> str:
        """How an object is named in the log line of a write."""
        return f"{k[0]}/{k[1]}"

    def rejected(self, member: str, want: Obj, e: Exception) -> Obj | None:
        """A second body to create when the API rejects `want` with `e`; None: no second try."""
        return None
