"""Spec vectors (`specs/*.yaml`): loading them, the query each vector sends, the conformance
probe and the pass counts per spec; `speccheck` compares a response with a vector.

Shared by `tests/zone/test_specs.py` (queries with dnspython) and `conformance/run`
(queries with dig). The format is described in `specs/README.md`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
SPECS = REPO / "specs"
ZONE = "clusterset.local."
QUERY_KEYS = {"id", "name", "type", "transport", "edns", "opcode", "rd", "header_only", "serial",
              "expect"}
EXPECT_KEYS = {"rcode", "drop_ok", "flags", "question", "opt", "answer", "answer_order",
               "answer_count", "answer_rrsets", "authority", "authority_types", "additional"}
# The probe service the conformance runner adds to every fixture set, to see when a
# server has picked up a new set (see `probe`).
PROBE_NAMESPACE, PROBE_SERVICE = "mcs-conformance", "probe"


class SpecError(ValueError):
    """A spec file does not follow the format."""


@dataclass(frozen=True)
class Query:
    """What one vector sends."""

    name: str  # presentation format; ignored when header_only
    type: str = "A"
    transport: str = "udp"  # udp | tcp
    edns: dict[str, Any] | None = None  # {version, payload, do}; None: no OPT record
    opcode: str = "QUERY"
    rd: bool = False
    header_only: bool = False  # a bare header, QDCOUNT=0
    serial: int | None = None  # IXFR: SOA with this serial in Authority (RFC 1995)

    @property
    def edns_version(self) -> int:
        return int((self.edns or {}).get("version", 0))

    @property
    def edns_payload(self) -> int:
        return int((self.edns or {}).get("payload", 1232))

    @property
    def edns_do(self) -> bool:
        return bool((self.edns or {}).get("do", False))


@dataclass(frozen=True)
class Vector:
    """One query of a spec file and the answer it expects."""

    spec: str  # file stem, e.g. "2.3.1-clustersetip-a-aaaa"
    id: str
    query: Query
    expect: dict[str, Any]

    @property
    def test_id(self) -> str:
        return f"{self.spec}:{self.id}"


@dataclass
class Spec:
    """One spec file: its fixtures and vectors."""

    path: Path
    section: str
    title: str
    fixtures: list[dict[str, Any]]
    vectors: list[Vector]
    # mcsdns arguments this file's behaviour needs (e.g. locality); runners start a
    # dedicated server with them, and cannot check such a file against a server they
    # did not start
    server_args: list[str] = field(default_factory=list)

    @property
    def stem(self) -> str:
        return self.path.stem

    def fixtures_yaml(self, extra: Iterable[dict[str, Any]] = ()) -> str:
        """The fixtures (and `extra` objects) as one multi-document YAML text."""
        return yaml.safe_dump_all([*self.fixtures, *extra], sort_keys=False)

    def namespaces(self) -> list[str]:
        """Namespaces the fixtures live in, in first-use order."""
        out: dict[str, None] = {}
        for obj in self.fixtures:
            ns = (obj.get("metadata") or {}).get("namespace")
            if ns:
                out[ns] = None
        return list(out)


# ---- loading ----

def spec_files(paths: Sequence[str | Path] = ()) -> list[Path]:
    """The given spec files, or every `specs/*.yaml`, sorted."""
    if paths:
        return [Path(p).resolve() for p in paths]
    return sorted(SPECS.glob("*.yaml"))


def _raw(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise SpecError(f"{path}: not a mapping")
    return data


def _fixtures(path: Path, data: dict[str, Any], seen: tuple[Path, ...] = ()) -> list[dict[str, Any]]:
    if path in seen:
        raise SpecError(f"{path}: fixtures_from loop")
    out: list[dict[str, Any]] = []
    if "fixtures_from" in data:
        other = (path.parent / str(data["fixtures_from"])).resolve()
        out += _fixtures(other, _raw(other), (*seen, path))
    own = data.get("fixtures") or []
    if not isinstance(own, list) or not all(isinstance(o, dict) and "kind" in o for o in own):
        raise SpecError(f"{path}: fixtures must be a list of Kubernetes objects")
    return out + own


def _default_id(q: Query) -> str:
    parts = [q.name if not q.header_only else "(header only)", q.type]
    if q.transport != "udp":
        parts.append(q.transport)
    if q.edns is not None:
        parts.append(f"edns{q.edns_version}/{q.edns_payload}" + ("/do" if q.edns_do else ""))
    if q.opcode != "QUERY":
        parts.append(q.opcode)
    if q.rd:
        parts.append("rd")
    return " ".join(parts)


def load(path: str | Path) -> Spec:
    """Parse and validate one spec file."""
    path = Path(path).resolve()
    data = _raw(path)
    for key in ("section", "title", "vectors"):
        if key not in data:
            raise SpecError(f"{path}: missing {key!r}")
    vectors: list[Vector] = []
    ids: set[str] = set()
    for i, raw in enumerate(data["vectors"]):
        where = f"{path.name} vector {i}"
        if not isinstance(raw, dict) or "expect" not in raw:
            raise SpecError(f"{where}: needs an expect block")
        unknown = set(raw) - QUERY_KEYS
        bad_expect = set(raw["expect"]) - EXPECT_KEYS
        if unknown or bad_expect:
            raise SpecError(f"{where}: unknown keys {sorted(unknown | bad_expect)}")
        if not raw.get("header_only") and not raw.get("name"):
            raise SpecError(f"{where}: needs a name")
        edns = raw.get("edns")
        if edns is not None and not isinstance(edns, dict):
            raise SpecError(f"{where}: edns must be null or a mapping")
        transport = raw.get("transport", "udp")
        if transport not in ("udp", "tcp"):
            raise SpecError(f"{where}: transport must be udp or tcp")
        q = Query(name=str(raw.get("name") or "."), type=str(raw.get("type", "A")).upper(),
                  transport=transport, edns=edns, opcode=str(raw.get("opcode", "QUERY")).upper(),
                  rd=bool(raw.get("rd", False)), header_only=bool(raw.get("header_only", False)),
                  serial=raw.get("serial"))
        vid = str(raw.get("id") or _default_id(q))
        if vid in ids:
            raise SpecError(f"{where}: duplicate id {vid!r} (give it an id)")
        ids.add(vid)
        vectors.append(Vector(path.stem, vid, q, dict(raw["expect"])))
    server_args = data.get("server_args") or []
    if not isinstance(server_args, list) or not all(isinstance(a, str) for a in server_args):
        raise SpecError(f"{path}: server_args must be a list of strings")
    return Spec(path, str(data["section"]), str(data["title"]), _fixtures(path, data), vectors,
                server_args)


def load_all(paths: Sequence[str | Path] = ()) -> list[Spec]:
    return [load(p) for p in spec_files(paths)]


# ---- the conformance probe ----

def probe(generation: int) -> tuple[dict[str, Any], str, str]:
    """A ClusterSetIP ServiceImport whose address encodes `generation`, its DNS name and that
    address: once the name answers with it, the server has read the fixture set it came with."""
    ip = f"10.255.{generation // 250 % 250}.{generation % 250 + 1}"
    obj = {
        "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
        "metadata": {"name": PROBE_SERVICE, "namespace": PROBE_NAMESPACE},
        "spec": {"type": "ClusterSetIP", "ips": [ip],
                 "ports": [{"name": "probe", "protocol": "TCP", "port": 1}]},
    }
    return obj, f"{PROBE_SERVICE}.{PROBE_NAMESPACE}.svc.{ZONE}", ip


# ---- reporting ----

def sections(specs: Iterable[Spec], results: dict[str, list[str]]) -> list[tuple[str, str, int, int]]:
    """(section, title, passed, total) per spec, from vector test_id -> problems
    (a vector with no entry did not run and counts as failed)."""
    rows = []
    for s in specs:
        total = len(s.vectors)
        passed = sum(1 for v in s.vectors if results.get(v.test_id) == [])
        rows.append((s.section, s.title, passed, total))
    return rows
