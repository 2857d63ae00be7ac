"""The members Secret in the controller's cluster: one key per member, its kubeconfig
(mounted as `mcsdns controller --members-dir`, the key the file name)."""

from __future__ import annotations

import base64

from ..kube.apiclient.client import Client
from ..kube.apiclient.errors import NotFound
from ..kube.resources import SECRETS
from .layout import PART_OF
from .objects import manifest, until_no_conflict


def put_key(c: Client, namespace: str, name: str, key: str, text: str) -> str:
    """Set one key of the Secret (made when missing): "created", "updated" or "unchanged"."""
    value = base64.b64encode(text.encode()).decode()
    path = SECRETS.path(namespace, name)

    def attempt() -> str:
        try:
            cur = c.get(path)
        except NotFound:
            body = manifest(SECRETS, name, namespace, PART_OF, type="Opaque", data={key: value})
            c.request("POST", SECRETS.path(namespace), body=body)
            return "created"
        data = dict(cur.get("data") or {})
        if data.get(key) == value:
            return "unchanged"
        before = key in data
        data[key] = value
        c.request("PUT", path, body=dict(cur, data=data))
        return "updated" if before else "created"
    return until_no_conflict(f"secret {namespace}/{name}", attempt)


def drop_key(c: Client, namespace: str, name: str, key: str) -> bool:
    """Remove one key of the Secret; False when it (or the Secret) was not there."""
    path = SECRETS.path(namespace, name)

    def attempt() -> bool:
        try:
            cur = c.get(path)
        except NotFound:
            return False
        data = dict(cur.get("data") or {})
        if data.pop(key, None) is None:
            return False
        c.request("PUT", path, body=dict(cur, data=data))
        return True
    return until_no_conflict(f"secret {namespace}/{name}", attempt)
