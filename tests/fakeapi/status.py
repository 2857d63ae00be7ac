"""The test API server's error answers: Kubernetes `Status` bodies, as kube-apiserver sends them."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]


def status(code: int, reason: str, message: str = "") -> Obj:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message or reason, "reason": reason, "code": code}


class HTTPError(Exception):
    """An error answer, with the Status body kube-apiserver sends."""

    def __init__(self, code: int, reason: str, message: str = "") -> None:
        super().__init__(message or reason)
        self.code, self.body = code, status(code, reason, message)


# ---- selectors -------------------------------------------------------------------------------


class RawJSON(bytes):
    """A response body already encoded."""
