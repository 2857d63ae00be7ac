"""Spec vectors (`specs/*.yaml`): loading, the query each vector sends, and checking a response.

Shared by `tests/zone/test_specs.py` (queries with dnspython) and `conformance/run`
(queries with dig). Both turn what they received into a `Response` of
presentation-format strings, and `check` compares it with the vector's
`expect` block. The format is described in `specs/README.md`.
"""

from __future__ import annotations

import ipaddress
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
SPECS = REPO / "specs"
ZONE = "clusterset.local."
WILDCARD = "*"
FLAGS = ("qr", "aa", "tc", "rd", "ra", "ad", "cd")
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


@dataclass
class Response:
    """A DNS response as presentation text, from either runner."""

    rcode: str
    flags: set[str]
    opt: dict[str, Any] | None  # {version, udp, do} or None when there was no OPT
    question: str | None  # the echoed question name, exactly as received
    answer: list[str] = field(default_factory=list)
    authority: list[str] = field(default_factory=list)
    additional: list[str] = field(default_factory=list)  # without the OPT pseudo-record


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


# ---- comparing records ----

def _tokens(text: str) -> list[str]:
    try:
        return shlex.split(text, posix=False)
    except ValueError:
        return text.split()


def normalize_rr(text: str) -> tuple[str, ...]:
    """`name ttl class type rdata...` as comparable tokens: names and types in lower/upper
    case, IPv6 addresses compressed, TXT strings untouched. `*` tokens stay wildcards."""
    toks = _tokens(text)
    if len(toks) < 4:
        raise SpecError(f"not a resource record: {text!r}")
    name, ttl, cls, rtype, *rdata = toks
    name = name.lower() if name.endswith(".") or name == WILDCARD else name.lower() + "."
    rtype = rtype.upper()
    if rtype == "AAAA" and rdata and rdata[0] != WILDCARD:
        rdata = [str(ipaddress.IPv6Address(rdata[0]))]
    elif rtype != "TXT":
        rdata = [t.lower() for t in rdata]
    return (name, ttl, cls.upper(), rtype, *rdata)


def rr_type(text: str) -> str:
    return normalize_rr(text)[3]


def _matches(want: tuple[str, ...], got: tuple[str, ...], ignore_ttl: bool) -> bool:
    if len(want) != len(got):
        return False
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        if w == WILDCARD or (i == 1 and ignore_ttl):
            continue
        if w != g:
            return False
    return True


def _assign(want: list[tuple[str, ...]], got: list[tuple[str, ...]], ignore_ttl: bool) -> list[int]:
    """A one-to-one match of `want` into `got` (bipartite, augmenting paths): for each
    want index the got index, or -1 when it has none."""
    owner: dict[int, int] = {}

    def place(w: int, seen: set[int]) -> bool:
        for g in range(len(got)):
            if g in seen or not _matches(want[w], got[g], ignore_ttl):
                continue
            seen.add(g)
            if g not in owner or place(owner[g], seen):
                owner[g] = w
                return True
        return False

    for w in range(len(want)):
        place(w, set())
    out = [-1] * len(want)
    for g, w in owner.items():
        out[w] = g
    return out


def _fmt(rrs: Iterable[str]) -> str:
    lines = [f"      {r}" for r in rrs]
    return "\n".join(lines) if lines else "      (none)"


def _compare_set(label: str, want: list[str], got: list[str], ignore_ttl: bool, exact_set: bool,
                 ordered: bool = False) -> list[str]:
    w = [normalize_rr(x) for x in want]
    g = [normalize_rr(x) for x in got]
    if ordered:
        ok = len(w) == len(g) and all(_matches(a, b, ignore_ttl) for a, b in zip(w, g, strict=True))
    else:
        assign = _assign(w, g, ignore_ttl)
        ok = -1 not in assign and (not exact_set or len(w) == len(g))
    if ok:
        return []
    how = "in this order" if ordered else "exactly (any order)" if exact_set else "at least"
    return [f"{label}: expected {how}:\n{_fmt(want)}\n    got:\n{_fmt(got)}"]


def _rcode_ok(want: Any, got: str) -> bool:
    options = want if isinstance(want, list) else [want]
    return got.upper() in {str(o).upper() for o in options}


def srv_any_priority(rrs: Iterable[str]) -> list[str]:
    """Expected RRs with SRV priority and weight made wildcards: the spec leaves both to
    the implementation, and locality-aware servers set the priority per cluster."""
    out = []
    for text in rrs:
        toks = _tokens(text)
        if len(toks) >= 8 and toks[3].upper() == "SRV":
            toks[4] = toks[5] = WILDCARD
            text = " ".join(toks)
        out.append(text)
    return out


def check(v: Vector, r: Response | None, ignore_ttl: bool = False,  # noqa: C901 - one comparison per answer section, as the spec format lists them
          any_srv_priority: bool = False) -> list[str]:
    """Problems with response `r` (None: no response arrived) for vector `v`; [] if it passes.
    `any_srv_priority`: do not compare SRV priority and weight."""
    e = dict(v.expect)
    if any_srv_priority:
        for key in ("answer", "additional", "authority"):
            if key in e:
                e[key] = srv_any_priority(e[key])
        if e.get("answer_order") == "exact" and any(rr_type(x) == "SRV" for x in e.get("answer", [])):
            e["answer_order"] = "any"  # priorities reorder SRV records
    if r is None:
        return [] if e.get("drop_ok") else ["no response (timed out)"]
    out: list[str] = []
    if "rcode" in e and not _rcode_ok(e["rcode"], r.rcode):
        out.append(f"rcode: expected {e['rcode']}, got {r.rcode}")
    for flag, want in (e.get("flags") or {}).items():
        if flag not in FLAGS:
            raise SpecError(f"{v.test_id}: unknown flag {flag!r}")
        if (flag in r.flags) != bool(want):
            out.append(f"flag {flag}: expected {int(bool(want))}, got {int(flag in r.flags)} "
                       f"(flags: {' '.join(sorted(r.flags)) or '-'})")
    if "question" in e and r.question != e["question"]:
        out.append(f"question: expected {e['question']!r} (exact case), got {r.question!r}")
    if "opt" in e:
        want_opt = e["opt"]
        if want_opt is None:
            if r.opt is not None:
                out.append(f"OPT: expected none, got {r.opt}")
        elif r.opt is None:
            out.append(f"OPT: expected {want_opt}, got none")
        else:
            for k, val in want_opt.items():
                if r.opt.get(k) != val:
                    out.append(f"OPT {k}: expected {val}, got {r.opt.get(k)}")
    if "answer" in e:
        ordered = e.get("answer_order", "any") == "exact"
        out += _compare_set("answer", list(e["answer"]), r.answer, ignore_ttl, True, ordered)
    if "answer_count" in e and len(r.answer) != int(e["answer_count"]):
        out.append(f"answer: expected {e['answer_count']} records, got {len(r.answer)}")
    if "answer_rrsets" in e:
        rrsets = {(t[0], t[3]) for t in (normalize_rr(x) for x in r.answer)}
        if len(rrsets) != int(e["answer_rrsets"]):
            out.append(f"answer: expected {e['answer_rrsets']} RRset(s), got {len(rrsets)}:\n"
                       f"{_fmt(r.answer)}")
    if "authority" in e:
        out += _compare_set("authority", list(e["authority"]), r.authority, ignore_ttl, True)
    if "authority_types" in e:
        want_t = sorted(str(t).upper() for t in e["authority_types"])
        got_t = sorted({rr_type(x) for x in r.authority})
        if want_t != got_t:
            out.append(f"authority types: expected {want_t}, got {got_t}:\n{_fmt(r.authority)}")
    if "additional" in e:
        out += _compare_set("additional", list(e["additional"]), r.additional, ignore_ttl, False)
    for label, rrs in (("answer", r.answer), ("authority", r.authority), ("additional", r.additional)):
        dups = duplicates(rrs)
        if dups:
            out.append(f"{label}: duplicate records (RFC 2181 5):\n{_fmt(dups)}")
    return out


def duplicates(rrs: Iterable[str]) -> list[str]:
    """Records that repeat an earlier one of the same section (name, class, type and rdata
    equal; TTL aside): an RRset never holds the same record twice (RFC 2181 5)."""
    seen: set[tuple[str, ...]] = set()
    out = []
    for text in rrs:
        toks = normalize_rr(text)
        key = toks[:1] + toks[2:]
        if key in seen:
            out.append(text)
        seen.add(key)
    return out


def sections(specs: Iterable[Spec], results: dict[str, list[str]]) -> list[tuple[str, str, int, int]]:
    """(section, title, passed, total) per spec, from vector test_id -> problems
    (a vector with no entry did not run and counts as failed)."""
    rows = []
    for s in specs:
        total = len(s.vectors)
        passed = sum(1 for v in s.vectors if results.get(v.test_id) == [])
        rows.append((s.section, s.title, passed, total))
    return rows
