"""`--state-dir`: the last synced objects on disk, for a restart while the API is down.

The file `<dir>/objects.json` holds one header line (JSON: format, version,
`as_of` = when the data was last confirmed by the source, the watched
namespaces, the body's length and SHA-256) and a body: a JSON list of the
store's objects in a compact Kubernetes form (each model's `manifest`: only what DNS
needs), so that restoring goes through the same parsers as live objects. It is written
atomically (`fileio.write_atomic`), and read back only if it is at most
MAX_BYTES, the header, length and checksum all match and its times are in
range; anything else is reported and ignored. A snapshot over MAX_BYTES is
not written.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..ops import fileio
from .objects import ClusterProperty, EndpointSlice, ServiceImport

OBJECTS_FILE = "objects.json"
FORMAT = "mcsdns-objects"
VERSION = 1
HEADER_MAX = 64 * 1024
MAX_BYTES = 256 << 20  # state file size cap, read and write (about a million objects)
TIME_MAX = 2**37  # header times are unix seconds below this (year 6325: datetime can show it)

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


def encode(imports: list[ServiceImport], slices: list[EndpointSlice], cluster_id: str | None,
           namespaces: list[str], as_of: float) -> bytes:
    """The file's bytes for these objects."""
    objs = [si.manifest() for si in imports] + [sl.manifest() for sl in slices]
    if cluster_id:
        objs.append(ClusterProperty(cluster_id).manifest())
    body = json.dumps(objs, separators=(",", ":")).encode()
    header = {"format": FORMAT, "version": VERSION, "as_of": as_of, "written": time.time(),
              "namespaces": sorted(namespaces), "objects": len(objs), "bytes": len(body),
              "sha256": hashlib.sha256(body).hexdigest()}
    return json.dumps(header).encode() + b"\n" + body


def write_atomic(path: Path, data: bytes) -> None:
    """Replace the state file with `data` (`fileio.write_atomic`); OSError (EFBIG)
    if it is over MAX_BYTES, which `read` would refuse."""
    if len(data) > MAX_BYTES:
        raise OSError(errno.EFBIG, f"state is {len(data)} bytes, over the limit of {MAX_BYTES}")
    fileio.write_atomic(path, data)


def _time(v: Any) -> float | None:
    """A header time as a float, None unless a number 0 <= v < TIME_MAX."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < TIME_MAX:
        return None  # NaN fails the comparison too
    return float(v)


def _json(raw: bytes, what: str, then: str = "") -> Any:
    """`raw` decoded; StateError naming `what` (and adding `then`) if it is not JSON."""
    try:
        return json.loads(raw)
    except ValueError as e:
        raise StateError(f"{what} is not JSON ({e}){then}") from None
    except RecursionError:
        raise StateError(f"{what} is nested too deep{then}") from None


def decode(data: bytes, namespaces: list[str]) -> Saved:
    """The objects of a state file written for the same watched namespaces; StateError if
    the bytes are not such a file, complete and unchanged."""
    head, sep, body = data.partition(b"\n")
    if not sep or len(head) > HEADER_MAX:
        raise StateError("no header line: not an mcsdns state file")
    header = _json(head, "header", ": not an mcsdns state file")
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
    as_of, written = _time(header.get("as_of")), _time(header.get("written"))
    if as_of is None or written is None:
        raise StateError("header times are not unix times")
    objs = _json(body, "body")
    if not isinstance(objs, list) or not all(isinstance(o, dict) for o in objs):
        raise StateError("body is not a list of objects")
    return Saved(objs, as_of, written)


def read(path: Path, namespaces: list[str]) -> Saved | None:
    """The saved state, None if there is no file; StateError if it is unusable."""
    try:
        data = fileio.read_bounded(path, MAX_BYTES)
    except FileNotFoundError:
        return None
    except (OSError, fileio.Refused) as e:
        raise StateError(f"cannot read: {e}") from None
    return decode(data, namespaces)
