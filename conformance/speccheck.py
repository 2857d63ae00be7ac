"""Checking a response against a spec vector's `expect` block (the format: `specs/README.md`).

Both runners turn what they received into a `Response` of presentation-format strings;
`check` lists how it differs from what the vector expects ([] when it passes).
"""

from __future__ import annotations

import ipaddress
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from speclib import SpecError, Vector

WILDCARD = "*"
FLAGS = ("qr", "aa", "tc", "rd", "ra", "ad", "cd")


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
