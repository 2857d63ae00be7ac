"""The rows of `mcsdns show`, from each member's snapshot (diagnose.collect) and the verdicts
diagnose gives on the same objects (export conditions, locality, credential expiry)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ..diagnose import checks, locality
from ..diagnose.checks import Result
from ..diagnose.collect import Snapshot, collect, why
from ..diagnose.credential import credential_checks
from ..diagnose.members import Clusters
from ..kube.apiclient.client import Client
from ..kube.apiclient.errors import ApiError
from ..kube.apiclient.keys import Key
from ..kube.apiclient.transport import Timeout

PROBE: Timeout = (2.0, 3.0)  # the reachability probe's deadline: connect, read


@dataclass
class Member:
    """One member cluster."""

    name: str
    server: str
    reachable: bool
    state: str  # "ready" or why not
    cluster_id: str | None = None
    version: str = ""
    credential: str = ""  # when the kubeconfig's credential expires ("" when it does not say)
    credential_due: bool = False  # expired, or less than a fifth of its lifetime left
    exports: int = 0
    imports: int = 0
    problems: list[str] = field(default_factory=list)  # reads that failed


@dataclass
class Service:
    """One exported or imported service of the clusterset."""

    namespace: str
    name: str
    type: str  # ClusterSetIP, Headless, or "" when no member imports it and no export is valid
    exported_by: list[str]
    imported_in: list[str]
    ips: dict[str, list[str]]  # importing member -> its ServiceImport's ips
    conflicts: list[dict[str, str]]  # member ("": the merged service), message: its export's
    # Conflict=True or failed Valid/Ready condition, or the members' disagreement on locality
    locality: dict[str, str]  # importing member -> locality verdict; {} when the service does not opt in


@dataclass
class Inventory:
    """What `mcsdns show` prints."""

    members: list[Member]
    services: list[Service]


def probe(name: str, c: Client) -> tuple[bool, str]:
    """GET /readyz within PROBE: (answered 200, "ready" or why not)."""
    try:
        resp = c.open("GET", "/readyz", timeout=PROBE, accept="text/plain")
        try:
            resp.read()
        finally:
            resp.release_conn()
    except (ApiError, OSError) as e:
        return False, why(e).removeprefix(f"{name}: ")
    return True, "ready"


def read(cs: Clusters) -> Inventory:
    """Probe every member, read the reachable ones, build the rows."""
    ms = cs.clients
    with ThreadPoolExecutor(max_workers=len(ms)) as pool:
        probes = dict(zip(ms, pool.map(lambda m: probe(*m), ms.items()), strict=True))
        up = [n for n in ms if probes[n][0]]
        snaps = list(pool.map(lambda n: collect(n, ms[n], ()), up))
    live = [s for s in snaps if s.error is None]
    creds = {r.cluster: r for r in credential_checks(ms)}
    members = [_member(n, ms[n], probes[n], next((s for s in snaps if s.name == n), None), creds.get(n))
               for n in ms]
    zones = locality.read_zones({s.name: ms[s.name] for s in live}, live)
    services = [_service(live, key, zones) for key in checks.keys(live, None)]
    return Inventory(members, services)


def _member(name: str, c: Client, probed: tuple[bool, str], s: Snapshot | None,
            cred: Result | None) -> Member:
    m = Member(name, c.host, probed[0] and s is not None and s.error is None, probed[1])
    if cred is not None:
        m.credential, m.credential_due = cred.message.split(": ")[0], cred.status != checks.OK
    if s is None:
        return m
    if s.error is not None:
        m.state = s.error
    m.cluster_id, m.version = s.cluster_id, s.version
    m.exports, m.imports = len(s.exports), len(s.imports)
    m.problems = list(s.unread)
    return m


def _service(live: list[Snapshot], key: Key, zones: locality.Zones) -> Service:
    imports = {s.name: s.imports[key] for s in live if key in s.imports}
    types = [str((si.get("spec") or {}).get("type") or "") for si in imports.values()]
    merged = locality.merged(live, key)
    conflicts = [{"member": r.cluster, "message": r.message}
                 for r in (*checks.export_checks(live, key), *locality.checks(live, key, zones))
                 if r.status != checks.OK and (r.check == "export" or not r.cluster)]
    verdicts = {r.cluster: r.message for r in locality.checks(live, key, zones) if r.cluster}
    return Service(
        namespace=key[0], name=key[1],
        type=next((t for t in types if t), merged.type if merged is not None else ""),
        exported_by=[s.name for s in live if key in s.exports],
        imported_in=list(imports),
        ips={n: [str(ip) for ip in (si.get("spec") or {}).get("ips") or []] for n, si in imports.items()},
        conflicts=conflicts, locality=verdicts)
