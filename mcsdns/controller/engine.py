"""The engine that applies a kind's contract in one member for one service: create, update
when the view differs, delete, write a status; each result noted in the member's cache, and
every failure handled by `POLICY`, keyed by (kind, verb)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..kube.apiclient.errors import ApiError, Conflict, NotFound, Unreachable, asked_wait, explain
from ..kube.apiclient.keys import Key
from .contract import Contract, Kind, Obj, Verb, label
from .member.client import MemberClient
from .member.view import MemberView
from .writers import Writers

log = logging.getLogger("mcsdns.controller")


@dataclass
class Result:
    """Bookkeeping of one reconcile of one key."""

    failed: list[str] = field(default_factory=list)  # why the service is not imported everywhere
    retry: bool = False
    wait: float = 0.0  # the longest Retry-After a failed write's answer asked for (capped)
    writes: int = 0
    failed_in: dict[str, list[str]] = field(default_factory=dict)  # member name -> its part of `failed`
    changed: bool = False  # a member's failures differ from its last reconcile's (`reconcile_in`)

    def fail(self, member: str, why: str) -> None:
        """A reason the service is not imported everywhere, in `member`."""
        self.failed.append(why)
        self.failed_in.setdefault(member, []).append(why)


@dataclass(frozen=True)
class Policy:
    """What a failed write means. Every failure asks for a retry."""

    gone_is_done: bool  # a 404 means the write's goal is met (the object is already gone)
    blocks_import: bool  # named in the export's Ready condition (the service is not imported)


_WRITE = Policy(gone_is_done=False, blocks_import=True)
_DELETE = Policy(gone_is_done=True, blocks_import=True)
_REPORT = Policy(gone_is_done=False, blocks_import=False)  # the export's own status: not importing
POLICY: dict[tuple[Kind, Verb], Policy] = {
    (Kind.SERVICE_IMPORT, Verb.CREATE): _WRITE, (Kind.SERVICE_IMPORT, Verb.UPDATE): _WRITE,
    (Kind.SERVICE_IMPORT, Verb.STATUS): _WRITE, (Kind.SERVICE_IMPORT, Verb.DELETE): _DELETE,
    (Kind.SERVICE, Verb.CREATE): _WRITE, (Kind.SERVICE, Verb.UPDATE): _WRITE,
    (Kind.SERVICE, Verb.DELETE): _DELETE,
    (Kind.ENDPOINT_SLICE, Verb.CREATE): _WRITE, (Kind.ENDPOINT_SLICE, Verb.UPDATE): _WRITE,
    (Kind.ENDPOINT_SLICE, Verb.DELETE): _DELETE,
    (Kind.SERVICE_EXPORT, Verb.STATUS): _REPORT,
}


def put_status(m: MemberClient, path: str, body: Obj) -> Obj:
    """PUT the status subresource; where there is none, the whole object carries it."""
    try:
        out: Obj = m.request("PUT", path + "/status", body=body)
    except NotFound:
        out = m.request("PUT", path, body=body)
    return out


class Engine:
    """Applies contracts in one member for one service key, recording into `r`."""

    def __init__(self, mc: MemberView, key: Key, r: Result, writers: Writers | None = None) -> None:
        self.mc, self.key, self.r, self.writers = mc, key, r, writers

    def run(self, kind: Kind, verb: Verb, fn: Callable[[], Any]) -> Any:
        """One write; on failure log it, apply the policy of (kind, verb), return None."""
        policy, what, name = POLICY[(kind, verb)], label(kind, verb), self.mc.member.name
        try:
            if not self.mc.reachable:  # found unreachable meanwhile: no more writes until it is back
                raise Unreachable(f"{name}: unreachable")
            out = fn()
            self.r.writes += 1
            return out
        except Conflict as e:
            log.info("cluster %s: %s %s/%s changed meanwhile, retrying: %s", name, what, *self.key, e)
        except NotFound as e:
            if policy.gone_is_done:
                return None  # already gone (e.g. garbage-collected with its ServiceImport)
            log.info("cluster %s: %s %s/%s: not found (deleted meanwhile?), retrying: %s", name, what,
                     *self.key, e)
        except Unreachable as e:  # a warning while the member counts as reachable, once it is its own
            log.log(logging.WARNING if self.mc.reachable else logging.INFO, "cluster %s: %s %s/%s: %s", name,
                    what, *self.key, e)
            self.r.wait = max(self.r.wait, asked_wait(e) or 0.0)
        except ApiError as e:
            log.error("cluster %s: %s %s/%s rejected: %s", name, what, *self.key, explain(e))
        self.r.retry = True
        if policy.blocks_import:
            self.r.fail(name, f"{what} failed in cluster {self.mc.member.cluster_id}")
        return None

    def foreign(self, failure: str, msg: str, *args: Any) -> None:
        """Someone else's object is where ours belongs: log it, leave it, say why."""
        log.warning("cluster %s: " + msg, self.mc.member.name, *args)
        self.r.fail(self.mc.member.name, failure)

    # --- one object ---------------------------------------------------------------------
    def _send(self, c: Contract, method: str, path: str, body: Obj) -> Obj:
        """A create or update, stamped with our writer identity (`writers`)."""
        if self.writers is not None:
            body = self.writers.stamp(body)
        obj: Obj = self.mc.member.request(method, path, body=body)
        self._noted(c, obj)
        return obj

    def _noted(self, c: Contract, obj: Obj) -> None:
        self.mc.note_written(c.resource, obj)
        if self.writers is not None:
            self.writers.note(self.mc.member.name, c.resource, obj)

    def _log(self, c: Contract, verb: Verb, k: Key) -> None:
        log.info("cluster %s: %s %s %s", self.mc.member.name, verb.value, c.kind.value,
                 c.describe(self.key, k, verb))

    def create(self, c: Contract, want: Obj) -> Obj | None:
        k = (want["metadata"]["namespace"], want["metadata"]["name"])
        self._log(c, Verb.CREATE, k)

        def call() -> Obj:
            path = c.path(self.mc.member, k[0])
            try:
                return self._send(c, "POST", path, want)
            except ApiError as e:
                again = c.rejected(self.mc.member.name, want, e)
                if again is None:
                    raise
                return self._send(c, "POST", path, again)
        out: Obj | None = self.run(c.kind, Verb.CREATE, call)
        return out

    def apply(self, c: Contract, want: Obj, have: Obj | None) -> Obj | None:
        """`have` brought to `want`: created, updated when the views differ, else kept."""
        if have is None:
            return self.create(c, want)
        if c.view(have) == c.view(want):
            return have
        k = (want["metadata"]["namespace"], want["metadata"]["name"])
        self._log(c, Verb.UPDATE, k)
        body = c.merge(have, want)
        out: Obj | None = self.run(c.kind, Verb.UPDATE,
                                   lambda: self._send(c, "PUT", c.path(self.mc.member, *k), body))
        return out

    def delete(self, c: Contract, k: Key) -> None:
        self._log(c, Verb.DELETE, k)

        def call() -> None:
            """Forgotten by the cache once gone; a failed delete keeps it there for the retry."""
            try:
                self.mc.member.request("DELETE", c.path(self.mc.member, *k))
            except NotFound:
                self.mc.note_written(c.resource, None, k)
                raise
            self.mc.note_written(c.resource, None, k)
        self.run(c.kind, Verb.DELETE, call)

    def status(self, c: Contract, k: Key, body: Obj) -> Obj | None:
        """Write `body`'s status (the caller compared it)."""
        def call() -> Obj:
            out = put_status(self.mc.member, c.path(self.mc.member, *k), body)
            self._noted(c, out)
            return out
        res: Obj | None = self.run(c.kind, Verb.STATUS, call)
        return res

    # --- a set of objects ----------------------------------------------------------------
    def sync(self, c: Contract, want: dict[Key, Obj], have: dict[Key, Obj]) -> dict[Key, Obj | None]:
        """Each wanted object applied (in key order), then each of `have` not wanted deleted;
        the objects as they are now."""
        out = {k: self.apply(c, d, have.get(k)) for k, d in sorted(want.items())}
        for k in sorted(set(have) - set(want)):
            self.delete(c, k)
        return out
