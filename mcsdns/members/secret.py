"""The members Secret in the controller's cluster: one key per member, its kubeconfig
(mounted as `mcsdns controller --members-dir`, the key the file name)."""

from __future__ import annotations

import base64

from ..kube.client import Client
from ..kube.errors import Conflict, NotFound
from ..kube.resources import SECRETS
from .layout import PART_OF
from .objects import manifest


def put_key(c: Client, namespace: str, name: str, key: str, text: str) -> str:
    """Set one key of the Secret (made when missing): "created", "updated" or "unchanged"."""
    value = base64.b64encode(text.encode()).decode()
    for _ in range(3):
        try:
            cur = c.get(SECRETS.path(namespace, name))
        except NotFound:
            body = manifest(SECRETS, name, namespace, PART_OF, type="Opaque", data={key: value})
            try:
                c.request("POST", SECRETS.path(namespace), body=body)
                return "created"
            except Conflict:
                continue
        data = dict(cur.get("data") or {})
        if data.get(key) == value:
            return "unchanged"
        before = key in data
        data[key] = value
        try:
            c.request("PUT", SECRETS.path(namespace, name), body=dict(cur, data=data))
            return "updated" if before else "created"
        except Conflict:
            continue
    raise Conflict(f"secret {namespace}/{name}: changed by someone else three times in a row; try again")


def drop_key(c: Client, namespace: str, name: str, key: str) -> bool:
    """Remove one key of the Secret; False when it (or the Secret) was not there."""
    for _ in range(3):
        try:
            cur = c.get(SECRETS.path(namespace, name))
        except NotFound:
            return False
        data = dict(cur.get("data") or {})
        if data.pop(key, None) is None:
            return False
        try:
            c.request("PUT", SECRETS.path(namespace, name), body=dict(cur, data=data))
            return True
        except Conflict:
            continue
    raise Conflict(f"secret {namespace}/{name}: changed by someone else three times in a row; try again")
