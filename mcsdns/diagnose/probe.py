"""`mcsdns diagnose --dns`: ask a member's mcsdns the names its objects imply and compare
the answers with what the objects say."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

import dns.exception
import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype

from ..controller.exports import labels
from ..controller.informers import slice_index
from ..dns.names import encode_name
from ..kube.apiclient.keys import Key
from ..kube.names import SOURCE_CLUSTER_LABEL
from .checks import FAIL, OK, Obj, Result
from .collect import Snapshot

TIMEOUT = 2.0


def ask(server: tuple[str, int], name: str, rdtype: str) -> tuple[str, set[str]]:
    """(rcode, addresses) of one query, over TCP: whole answers, and through a port-forward."""
    q = dns.message.make_query(name, rdtype)
    q.flags &= ~dns.flags.RD
    r = dns.query.tcp(q, server[0], port=server[1], timeout=TIMEOUT)
    want = dns.rdatatype.from_text(rdtype)
    addrs = {rd.to_text() for rrset in r.answer if rrset.rdtype == want for rd in rrset}
    return dns.rcode.to_text(r.rcode()), addrs


def _family(addrs: set[str], version: int) -> set[str]:
    return {a for a in addrs if ipaddress.ip_address(a).version == version}


def _sendable(name: str) -> bool:
    try:
        encode_name(name)
    except ValueError:
        return False
    return True


def expected(s: Snapshot, key: Key, si: Obj, zone: str) -> dict[str, set[str]]:
    """DNS name -> the addresses the objects say it has (A and AAAA together)."""
    name = f"{key[1]}.{key[0]}.svc.{zone}."
    spec = si.get("spec") or {}
    if spec.get("type") == "ClusterSetIP":
        return {name: set(spec.get("ips") or [])}
    out: dict[str, set[str]] = {name: set()}
    for sl in s.slices:
        if slice_index(sl) != ("ours", *key):
            continue
        cluster = labels(sl).get(SOURCE_CLUSTER_LABEL, "")
        for e in sl.get("endpoints") or []:
            if (e.get("conditions") or {}).get("ready") is False:
                continue
            addrs = set(e.get("addresses") or [])
            out[name] |= addrs
            if e.get("hostname") and cluster:
                out.setdefault(f"{e['hostname']}.{cluster}.{name}", set()).update(addrs)
    return out


def local(s: Snapshot, key: Key) -> set[str]:
    """The ready addresses of a headless service in this cluster's own slices: what a server
    started with `--prefer-local only-when-available` answers alone while there are any."""
    return {a for sl in s.slices if slice_index(sl) == ("ours", *key)
            and labels(sl).get(SOURCE_CLUSTER_LABEL) == s.cluster_id
            for e in sl.get("endpoints") or [] if (e.get("conditions") or {}).get("ready") is not False
            for a in e.get("addresses") or []}


def dns_checks(s: Snapshot, server: tuple[str, int], zone: str, only: Key | None) -> Iterator[Result]:
    """For each ServiceImport of the member: its names' A/AAAA answers against the objects."""
    where = f"{server[0]}:{server[1]}"
    for key, si in sorted(s.imports.items()):
        if only is not None and key != only:
            continue
        for name, want in sorted(expected(s, key, si, zone).items()):
            if not _sendable(name):
                continue  # left out of the zone: the names check says so
            got: set[str] = set()
            rcodes = []
            try:
                for rdtype, version in (("A", 4), ("AAAA", 6)):
                    rcode, addrs = ask(server, name, rdtype)
                    rcodes.append(rcode)
                    got |= _family(addrs, version)
            except (dns.exception.DNSException, OSError) as e:
                yield Result(FAIL, "dns", s.name, name, f"no answer from {where}: {e or 'timeout'}")
                return
            said = ", ".join(sorted(want)) or "no address"
            if got == want and (want or "NXDOMAIN" not in rcodes):
                yield Result(OK, "dns", s.name, name, f"{where} answers {said}")
            elif got and got < want and name == f"{key[1]}.{key[0]}.svc.{zone}." and got == local(s, key):
                yield Result(OK, "dns", s.name, name, f"{where} answers {', '.join(sorted(got))}: this "
                             f"cluster's endpoints alone, as --prefer-local only-when-available answers")
            elif "NXDOMAIN" in rcodes or "SERVFAIL" in rcodes:
                bad = "NXDOMAIN" if "NXDOMAIN" in rcodes else "SERVFAIL"
                yield Result(FAIL, "dns", s.name, name, f"{where} answers {bad}; the objects say {said} "
                             "(is that server watching this cluster, and ready?)")
            else:
                yield Result(FAIL, "dns", s.name, name, f"{where} answers "
                             f"{', '.join(sorted(got)) or 'nothing'}; the objects say {said}")
