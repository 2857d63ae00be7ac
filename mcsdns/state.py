"""`--state-dir`: the last synced objects on disk, for a restart while the API is down.

The file `<dir>/objects.json` holds one header line (JSON: format, version,
`as_of` = when the data was last confirmed by the source, the watched
namespaces, the body's length and SHA-256) and a body: a JSON list of the
store's objects in a compact Kubernetes form (only what DNS needs), so that
restoring goes through the same parsers as live objects. It is written
atomically (temporary file, fsync, rename, fsync of the directory), and read
back only if the header, length and checksum all match; anything else is
reported and ignored.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .objects import (
    CLUSTER_PROPERTY_ID,
    SERVICE_NAME_LABEL,
    SOURCE_CLUSTER_LABEL,
    EndpointSlice,
    Port,
    ServiceImport,
)

OBJECTS_FILE = "objects.json"
FORMAT = "mcsdns-objects"
VERSION = 1
HEADER_MAX = 64 * 1024

Obj = dict[str, Any]


class StateError(Exception):
    """The state file is corrupt, foreign or unreadable."""


@dataclass(frozen=True)
class Saved:
    """What a state file held."""

    objects: list[Obj]
    as_of: float  # unix time the data was last confirmed by the source
    written: float  # unix time the file was written


def objects_path(state_dir: str | os.PathLike[str]) -> Path:
    """The objects snapshot in a --state-dir (other files there belong to other features)."""
    return Path(state_dir) / OBJECTS_FILE


def _ip(packed: bytes) -> str:
    return socket.inet_ntop(socket.AF_INET if len(packed) == 4 else socket.AF_INET6, packed)


def _ports(ports: tuple[Port, ...]) -> list[Obj]:
    return [{"name": p.name, "protocol": p.protocol, "port": p.port} if p.name
            else {"protocol": p.protocol, "port": p.port} for p in ports]


def import_manifest(si: ServiceImport) -> Obj:
    return {"kind": "ServiceImport", "metadata": {"namespace": si.namespace, "name": si.name},
            "spec": {"type": "Headless" if si.headless else "ClusterSetIP",
                     "ips": [_ip(a) for a in si.ips], "ports": _ports(si.ports)}}


def slice_manifest(sl: EndpointSlice) -> Obj:
    eps = []
    for ep in sl.endpoints:
        e: Obj = {"addresses": [_ip(a) for a in ep.addresses],
                  "conditions": {"ready": ep.ready, "serving": ep.serving,
                                 "terminating": ep.terminating}}
        # a system-assigned name (dashed first address) is derived again on restore
        if ep.hostname != _ip(ep.addresses[0]).replace(".", "-").replace(":", "-"):
            e["hostname"] = ep.hostname
        if ep.zone:
            e["zone"] = ep.zone
        eps.append(e)
    return {"kind": "EndpointSlice",
            "metadata": {"namespace": sl.namespace, "name": sl.name,
                         "labels": {SERVICE_NAME_LABEL: sl.service, SOURCE_CLUSTER_LABEL: sl.cluster}},
            "addressType": "IPv6" if sl.ipv6 else "IPv4", "endpoints": eps, "ports": _ports(sl.ports)}


def cluster_id_manifest(cluster_id: str) -> Obj:
    return {"kind": "ClusterProperty", "metadata": {"name": CLUSTER_PROPERTY_ID[0]},
            "spec": {"value": cluster_id}}


def encode(imports: list[ServiceImport], slices: list[EndpointSlice], cluster_id: str | None,
           namespaces: list[str], as_of: float) -> bytes:
    """The file's bytes for these objects."""
    objs = [import_manifest(si) for si in imports] + [slice_manifest(sl) for sl in slices]
    if cluster_id:
        objs.append(cluster_id_manifest(cluster_id))
    body = json.dumps(objs, separators=(",", ":")).encode()
    header = {"format": FORMAT, "version": VERSION, "as_of": as_of, "written": time.time(),
              "namespaces": sorted(namespaces), "objects": len(objs), "bytes": len(body),
              "sha256": hashlib.sha256(body).hexdigest()}
    return json.dumps(header).encode() + b"\n" + body


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data`: temporary file, fsync, rename, fsync of the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def decode(data: bytes, namespaces: list[str]) -> Saved:
    """The objects of a state file written for the same watched namespaces; StateError if
    the bytes are not such a file, complete and unchanged."""
    head, sep, body = data.partition(b"\n")
    if not sep or len(head) > HEADER_MAX:
        raise StateError("no header line: not an mcsdns state file")
    try:
        header = json.loads(head)
    except ValueError as e:
        raise StateError(f"header is not JSON ({e}): not an mcsdns state file") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise StateError("header has no format marker: not an mcsdns state file")
    if header.get("version") != VERSION:
        raise StateError(f"format version {header.get('version')!r}, this mcsdns reads {VERSION}")
    if header.get("namespaces") != sorted(namespaces):
        raise StateError(f"written for namespaces {header.get('namespaces')!r}, "
                         f"watching {sorted(namespaces)!r}")
    if header.get("bytes") != len(body):
        raise StateError(f"body is {len(body)} bytes, header says {header.get('bytes')!r}: truncated")
    if header.get("sha256") != hashlib.sha256(body).hexdigest():
        raise StateError("body checksum does not match: corrupt")
    as_of, written = header.get("as_of"), header.get("written")
    if not isinstance(as_of, int | float) or not isinstance(written, int | float):
        raise StateError("header times are not numbers")
    try:
        objs = json.loads(body)
    except ValueError as e:
        raise StateError(f"body is not JSON: {e}") from None
    if not isinstance(objs, list) or not all(isinstance(o, dict) for o in objs):
        raise StateError("body is not a list of objects")
    return Saved(objs, float(as_of), float(written))


def read(path: Path, namespaces: list[str]) -> Saved | None:
    """The saved state, None if there is no file; StateError if it is unusable."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise StateError(f"cannot read: {e}") from None
    return decode(data, namespaces)
