"""The controller's writes: one call each, its result noted in the member's cache, and one
policy for failures (log, name it in the export's status, ask for a retry where one helps)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

from ..kube.errors import explain
from ..kube.keys import Key
from .clusters import Conflict, NotFound, Unreachable
from .member import MemberClient, MemberView

log = logging.getLogger("mcsdns.controller")


@dataclass
class Result:
    """Bookkeeping of one reconcile of one key."""

    failed: list[str] = field(default_factory=list)  # why the service is not imported everywhere
    retry: bool = False
    writes: int = 0


def write(mc: MemberView, r: Result, key: Key, what: str,
           fn: Callable[..., Any], *args: Any) -> Any:
    """One write; on failure log it, note why, and ask for a retry where one can help."""
    name = mc.member.name
    try:
        out = fn(*args)
        r.writes += 1
        return out
    except Conflict as e:
        log.info("cluster %s: %s %s/%s changed meanwhile, retrying: %s", name, what, *key, e)
        r.retry = True
    except NotFound as e:
        if what.startswith("delete"):
            return None  # already gone (e.g. garbage-collected with its ServiceImport)
        log.info("cluster %s: %s %s/%s: not found (deleted meanwhile?), retrying: %s", name, what,
                 *key, e)
        r.retry = True
    except Unreachable as e:
        log.warning("cluster %s: %s %s/%s: %s", name, what, *key, e)
        r.retry = True
    except ApiException as e:
        log.error("cluster %s: %s %s/%s rejected: %s", name, what, *key, explain(e))
        r.retry = True
    if not what.startswith("ServiceExport"):  # status writes do not make an import fail
        r.failed.append(f"{what} failed in cluster {mc.member.cluster_id}")
    return None


def put_status(m: MemberClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """PUT the status subresource; where there is none, the whole object carries it."""
    try:
        out: dict[str, Any] = m.request("PUT", path + "/status", body=body)
    except NotFound:
        out = m.request("PUT", path, body=body)
    return out


def create(mc: MemberView, cache: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    obj: dict[str, Any] = mc.member.request("POST", path, body=body)
    mc.note_written(cache, obj)
    return obj


def replace(mc: MemberView, cache: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    obj: dict[str, Any] = mc.member.request("PUT", path, body=body)
    mc.note_written(cache, obj)
    return obj


def delete(mc: MemberView, cache: str, path: str, k: Key) -> None:
    try:
        mc.member.request("DELETE", path)
    finally:
        mc.note_written(cache, None, k)
