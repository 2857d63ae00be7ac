"""What a member file (a `--members-dir` file: a key of the members Secret) may carry. It
is data, not a program: inline credentials and how to reach the server, never a file path
(a token file outside the directory would be sent to the file's server) nor a program to
run (an exec plugin or auth provider would run as the controller, next to every member's
credentials). As Flux does for kubeconfigs read from Secrets; an exec plugin only when the
operator allows it (`mcsdns controller --members-allow-exec`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CLUSTER = frozenset({"server", "certificate-authority-data", "tls-server-name", "proxy-url",
                     "insecure-skip-tls-verify", "disable-compression", "extensions"})
USER = frozenset({"token", "client-certificate-data", "client-key-data", "extensions"})
EXEC = "exec"


def refused(cluster: Mapping[str, Any], user: Mapping[str, Any], allow_exec: bool) -> tuple[str, str] | None:
    """(the first field of the context's cluster and user entries a member file may not carry,
    the reason in words); None when it carries only what it may. An empty value counts as
    absent. The field is shown as written when printable and short, else quoted and cut."""
    allowed_user = USER | {EXEC} if allow_exec else USER
    for entry, body, allowed in (("cluster", cluster, CLUSTER), ("user", user, allowed_user)):
        for key in sorted(body, key=str):
            if key not in allowed and body[key] not in (None, ""):
                text = str(key)
                field = text if text.isprintable() and len(text) <= 63 else repr(text[:60])
                carries = ", ".join(f"{e} {k}" for e, keys in (("cluster", CLUSTER), ("user", allowed_user))
                                    for k in sorted(keys) if k != "extensions")
                hint = "" if allow_exec else "; --members-allow-exec allows exec"
                return field, f"{entry} {field} refused (a member file carries data only: {carries}{hint})"
    return None
