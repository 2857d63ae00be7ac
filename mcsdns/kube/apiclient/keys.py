"""One key type for Kubernetes objects, in the server, the controller and `diagnose`."""

from __future__ import annotations

from typing import Any

Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects


def key_of(obj: dict[str, Any], namespace: str = "") -> Key:
    """An object's (namespace, name); `namespace` when it names none (manifests: "default",
    as kubectl applies them); ("", "") when its metadata is not an object."""
    md = obj.get("metadata") or {}
    if not isinstance(md, dict):
        return "", ""
    return str(md.get("namespace") or namespace), str(md.get("name") or "")
