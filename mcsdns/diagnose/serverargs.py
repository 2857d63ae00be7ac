"""What `mcsdns serve`'s pods (deploy/server's labels) are started with, against the
cluster's objects: a `--cluster-id` other than the ClusterProperty's is a WARN, since the
flag wins and answers rank another cluster's endpoints as local (serve logs it too)."""

from __future__ import annotations

from collections.abc import Iterator

from .checks import WARN, Obj, Result
from .collect import Snapshot


def flag(args: list[str], name: str) -> str | None:
    """The value of `--name V` or `--name=V` (the last one, as argparse takes it)."""
    found = None
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            found = args[i + 1]
        elif a.startswith(name + "="):
            found = a[len(name) + 1:]
    return found


def _args(pod: Obj) -> list[str]:
    spec = pod.get("spec") or {}
    return [str(a) for c in spec.get("containers") or [] if isinstance(c, dict)
            for a in (c.get("command") or []) + (c.get("args") or [])]


def server_checks(s: Snapshot) -> Iterator[Result]:
    """A WARN per --cluster-id the server pods give that the ClusterProperty does not say."""
    if not s.cluster_id:
        return  # the cluster-id line says what is missing
    by_id: dict[str, list[str]] = {}
    for pod in s.server_pods:
        given = flag(_args(pod), "--cluster-id")
        if given and given.lower() != s.cluster_id.lower():
            by_id.setdefault(given.lower(), []).append(str((pod.get("metadata") or {}).get("name") or "?"))
    for given, pods in sorted(by_id.items()):
        more = f" and {len(pods) - 1} more" if len(pods) > 1 else ""
        yield Result(WARN, "cluster-id", s.name, "",
                     f"mcsdns serve runs with --cluster-id {given} (pod {pods[0]}{more}), but "
                     f"ClusterProperty {s.cluster_property} says {s.cluster_id}: the flag wins, so answers "
                     f"rank {given}'s endpoints as local; fix whichever is wrong")
