"""The one taxonomy of Kubernetes API errors, and their explanation for a person.

Every failed request raises an `ApiError` (`status`, `reason` and `body` are the
API's): `NotFound` (404), `Conflict` (409), `Expired` (410 Gone),
`Unreachable` (no answer: status 0, the cause chained; 429 or a server error, with the wait
its Retry-After asks for in `retry_after`), `Rejected`
(any other error answer: 400, 401, 403, 422...) and `WatchError` (an ERROR event in a watch
stream). `explain` gives one line with the status, the API's own Status reason and message
and, for a refusal (403), the RBAC rule that would allow the request (`Request.rule`, from
the request's path and verbs); `Problems` tells each distinct one once; `error_kind` is
the metric label."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Hashable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

from ...ops.errors import ConfigError

VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}  # and GET: get, list


@dataclass(frozen=True)
class Request:
    """What a request asks for, as RBAC sees it: API group, resource, namespace, verbs."""

    group: str  # "" is the core group
    resource: str  # and "/subresource"
    namespace: str | None
    verbs: tuple[str, ...]

    @classmethod
    def of(cls, path: str, verbs: tuple[str, ...] = (), method: str = "GET") -> Request | None:
        """The request for a collection or object path (`/api/v1/...`, `/apis/G/V/...`): `verbs`,
        else the verb of `method` (GET: list a collection, get an object)."""
        parts = [p for p in path.split("?")[0].split("/") if p]
        if parts[:1] == ["api"] and len(parts) > 2:
            group, rest = "", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) > 3:
            group, rest = parts[1], parts[3:]
        else:
            return None
        ns = None
        if rest[0] == "namespaces" and len(rest) > 2:
            ns, rest = rest[1], rest[2:]
        verbs = verbs or (VERBS.get(method) or ("get" if len(rest) > 1 else "list"),)
        return cls(group, "/".join(rest[:1] + rest[2:3]), ns, verbs)

    def rule(self) -> str:
        """Where to add the RBAC rule that allows this request, and the rule."""
        def flow(xs: tuple[str, ...] | list[str]) -> str:
            return json.dumps(list(xs), separators=(",", ":"))

        where = (f'a Role in namespace "{self.namespace}" (or the ClusterRole)' if self.namespace
                 else "the ClusterRole")
        return (f"add to {where}: apiGroups: {flow([self.group])}, resources: {flow([self.resource])}, "
                f"verbs: {flow(self.verbs)}")


class ApiError(Exception):
    """A request that failed: the API's answer (`status`, `reason`, `body`, the seconds its
    Retry-After asked to wait), or none (status 0, the cause chained); `request` is what it
    asked for, as RBAC sees it; `str` is `message` when one is given."""

    def __init__(self, message: str = "", *, status: int = 0, reason: str = "",
                 body: bytes | str | None = None, request: Request | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status, self.reason, self.retry_after = status, reason, retry_after
        self.body = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        self.message = message
        self.request = request

    def __str__(self) -> str:
        return self.message or f"({self.status}) Reason: {self.reason}"


class NotFound(ApiError):
    """HTTP 404."""


class Conflict(ApiError):
    """HTTP 409: the object changed (or exists) since we read it."""


class Expired(ApiError):
    """410 Gone: the resourceVersion or continue token is too old; relist."""


class Unreachable(ApiError):
    """No answer (connection error, timeout), or 429 or a server error: worth a retry."""


class Rejected(ApiError):
    """Any other error answer (400, 401, 403, 422...): the request as made fails again."""


class WatchError(ApiError):
    """The watch stream reported an error other than 410."""


def error_for(status: int, reason: str, body: bytes | str | None, request: Request | None,
              message: str, retry_after: str | None = None) -> ApiError:
    """The error of an answer with HTTP `status` (300 or more) and its Retry-After header
    (heeded on a 429 or a server error, as client-go heeds it)."""
    cls: type[ApiError] = {404: NotFound, 409: Conflict, 410: Expired}.get(status) or (
        Unreachable if status >= 500 or status == 429 else Rejected)
    wait = parse_retry_after(retry_after) if cls is Unreachable else None
    return cls(message, status=status, reason=reason, body=body, request=request, retry_after=wait)


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """The seconds a Retry-After header asks to wait: whole seconds, or an HTTP date (from
    `now`, the time of day); None when there is none or it is neither."""
    value = (value or "").strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # RFC 9110: an HTTP date is in GMT; one without a zone is not one
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


RETRY_AFTER_MAX = 30.0  # the longest wait a Retry-After answer asks for that is honoured


def asked_wait(e: BaseException) -> float | None:
    """The seconds an error's answer asked to wait before a retry (Retry-After), if any, at
    most RETRY_AFTER_MAX."""
    return min(e.retry_after, RETRY_AFTER_MAX) if isinstance(e, ApiError) and e.retry_after is not None \
        else None


def status_of(e: ApiError) -> dict[str, Any]:
    """The Kubernetes Status object in an error response's body ({} when there is none)."""
    try:
        body = json.loads(e.body) if e.body else None
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) and body.get("kind") == "Status" else {}


def error_kind(e: BaseException) -> str:
    """A short metric label for a client error."""
    if isinstance(e, WatchError):
        return "watch_error"
    if isinstance(e, ApiError):
        return f"http_{e.status}" if e.status else "unreachable"
    if isinstance(e, ValueError):
        return "bad_response"
    return "unreachable"


def describe(e: BaseException) -> str:
    """A one-line description of a client error: status, reason and the API's message; for
    no answer, its cause."""
    if isinstance(e, ApiError):
        if not e.status:
            return describe(e.__cause__) if e.__cause__ is not None else str(e)
        st = status_of(e)
        out = f"HTTP {e.status} {st.get('reason') or e.reason}"
        msg = str(st.get("message") or "").strip()
        return f"{out}: {msg}"[:1000] if msg else out
    if isinstance(e, ConfigError):
        return str(e)
    return f"{type(e).__name__}: {e}".splitlines()[0][:300]


def explain(e: BaseException, request: Request | None = None) -> str:
    """`describe`, and what to do about a 401 or a 403 of `request` (an ApiError's own)."""
    if request is None and isinstance(e, ApiError):
        request = e.request
    out = describe(e)
    status = e.status if isinstance(e, ApiError) else None
    if status == 401:
        out += "; the kubeconfig's credentials (token, client certificate) were not accepted"
    elif status == 403 and request is not None:
        out += "; " + request.rule()
    return out


class Problems:
    """The current error of each of several watches, to log each distinct problem once: an
    error is new while no watch has the same problem; a watch's problem ends when it recovers."""

    def __init__(self) -> None:
        self.held: dict[Hashable, str] = {}
        self.lock = threading.Lock()

    def update(self, who: Hashable, e: BaseException | None, text: str = "") -> bool:
        """Record `who`'s outcome (None: success) and its explanation; True if it is a new problem.
        The same problem is the same explanation of an HTTP error or of a configuration error,
        the same kind of a failure to get an answer (connection errors differ in detail, not in
        meaning)."""
        key = None if e is None else error_kind(e) if _no_answer(e) else text
        with self.lock:
            new = key is not None and key not in self.held.values()
            if key is None:
                self.held.pop(who, None)
            else:
                self.held[who] = key
        return new


def _no_answer(e: BaseException) -> bool:
    if isinstance(e, ApiError):
        return not e.status
    return isinstance(e, OSError | ValueError)  # the transport's failures are OSErrors
