"""Where and how to reach an API server: a kubeconfig, loaded and merged as kubectl does,
or the pod's service account.

`$KUBECONFIG` may list several files: named clusters, users and contexts and the
current context come from the first file that sets them; relative paths are relative
to the file that names them; missing files are skipped. Values are read as strictly as
kubectl reads them (a boolean is a YAML boolean). Every failure is a `KubeconfigError`
whose message is one line naming the file. A member file (`data_only`) is data, not a
program: what it may not carry (`memberfile`) is refused before anything is read or run."""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from . import memberfile

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
DEFAULT = Path("~/.kube/config")
PLURALS = {"clusters": "cluster", "users": "user", "contexts": "context"}
EXEC_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
INSECURE_WITH_CA = "specifying a root certificates file with the insecure flag is not allowed"
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)?[^?#]*@")  # to the last @: a password may hold a /
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


class KubeconfigError(Exception):
    """The configuration could not be loaded; the message is one line. `context`: the
    context asked for is not there (the fault is the context named, not the file).
    `refused`: the member-file field refused (`memberfile`), else ""."""

    def __init__(self, message: str, context: bool = False, refused: str = "") -> None:
        super().__init__(message)
        self.context, self.refused = context, refused


@dataclass(frozen=True)
class Server:
    """A cluster entry: URL (without user info) and how to trust it. `ca` is PEM text (from
    a file or data). `basic`: the user info of the URL as written, sent as Basic auth when
    no other credential is (as Go's HTTP client does); never shown."""

    url: str
    ca: str | None = None
    insecure: bool = False
    tls_server_name: str | None = None
    proxy_url: str | None = None
    basic: tuple[str, str] | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Impersonation:
    """`as`, `as-uid`, `as-groups` and `as-user-extra` of a user entry."""

    user: str
    uid: str | None = None
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class Identity:
    """A user entry. Files stay paths (tokens are re-read when they change); `*_data` are
    PEM text; `exec` is the credential plugin's stanza as written."""

    token: str | None = field(default=None, repr=False)
    token_file: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    cert: str | None = None
    key: str | None = field(default=None, repr=False)
    exec: Mapping[str, Any] | None = None
    impersonate: Impersonation | None = None


@dataclass(frozen=True)
class Kubeconfig:
    """One resolved context: the server, the identity and where they came from."""

    server: Server
    identity: Identity
    source: str  # for messages: "kubeconfig PATH context NAME" or "in-cluster service account"
    namespace: str = "default"
    exec_cluster: Mapping[str, Any] = field(default_factory=dict)  # for provideClusterInfo


def load(kubeconfig: str | None, context: str | None, in_cluster: bool = False, *,
         data_only: bool = False, allow_exec: bool = False) -> Kubeconfig:
    """`kubeconfig` (None: $KUBECONFIG's files, else ~/.kube/config) at `context` (None:
    its current one). With `in_cluster` and neither given, the pod's service account when
    the process runs in a pod. `data_only`: a member file (`memberfile`; `allow_exec` lets
    it carry an exec plugin)."""
    if in_cluster and not kubeconfig and not context and os.environ.get("KUBERNETES_SERVICE_HOST"):
        return service_account()
    files = paths(kubeconfig)
    merged = merge([(p, read(p)) for p in files if kubeconfig or p.exists()])
    where = " ".join(str(p) for p in files)
    check = partial(_member_file, allow_exec=allow_exec) if data_only else None
    return resolve(merged, context, where, check)


def paths(kubeconfig: str | None) -> list[Path]:
    """The files to read, in order of precedence."""
    if kubeconfig:
        return [Path(kubeconfig).expanduser()]
    env = os.environ.get("KUBECONFIG", "")
    listed = [Path(p).expanduser() for p in env.split(os.pathsep) if p]
    return listed or [DEFAULT.expanduser()]


def read(path: Path) -> dict[str, Any]:
    """One file's mapping ({} when empty)."""
    import yaml  # here: in a pod (the service account) it is not needed, ~12 ms of CPU

    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise KubeconfigError(f"kubeconfig {path}: cannot read: {getattr(e, 'strerror', None) or e}") from e
    try:
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as e:
        raise KubeconfigError(f"kubeconfig {path}: not YAML: {' '.join(str(e).split())}") from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise KubeconfigError(f"kubeconfig {path}: not a kubeconfig (a {type(data).__name__}, "
                              "not a mapping with clusters, users and contexts)")
    return data


def merge(files: list[tuple[Path, dict[str, Any]]]) -> dict[str, Any]:
    """kubectl's merge: the first file that names an entry (or the current context) wins.
    Each entry remembers its file, for its relative paths and messages."""
    out: dict[str, Any] = {"clusters": {}, "users": {}, "contexts": {}, "current-context": ""}
    for path, data in files:
        if not out["current-context"] and isinstance(data.get("current-context"), str):
            out["current-context"] = data["current-context"]
        for plural, singular in PLURALS.items():
            entries = data.get(plural) or []
            if not isinstance(entries, list):
                raise KubeconfigError(f"kubeconfig {path}: {plural} is not a list")
            for e in entries:
                if not isinstance(e, dict) or not isinstance(e.get("name"), str):
                    raise KubeconfigError(f"kubeconfig {path}: an entry of {plural} has no name")
                body = e.get(singular) or {}
                if not isinstance(body, dict):
                    raise KubeconfigError(f"kubeconfig {path}: {singular} {e['name']} is not a mapping")
                out[plural].setdefault(e["name"], (path, body))
    return out


Check = Callable[[Mapping[str, Any], Mapping[str, Any], str], None]


def resolve(merged: dict[str, Any], context: str | None, where: str,
            check: Check | None = None) -> Kubeconfig:
    """The context `context` (or the current one) of a merged configuration; `check(cluster,
    user, source)` sees the entries before anything they name is read."""
    name = context or merged["current-context"]
    if not name:
        raise KubeconfigError(f"kubeconfig {where}: no current-context; name one with --context")
    if name not in merged["contexts"]:
        raise KubeconfigError(f"kubeconfig {where}: no context {name!r}", context=bool(context))
    cpath, ctx = merged["contexts"][name]
    source = f"kubeconfig {cpath} context {name}"
    cluster_name, user_name = ctx.get("cluster"), ctx.get("user")
    if cluster_name not in merged["clusters"]:
        raise KubeconfigError(f"{source}: no cluster {cluster_name!r}")
    kpath, cluster = merged["clusters"][cluster_name]
    if user_name and user_name not in merged["users"]:
        raise KubeconfigError(f"{source}: no user {user_name!r}")
    upath, user = merged["users"][user_name] if user_name else (cpath, {})
    if check is not None:
        check(cluster, user, source)
    return Kubeconfig(_server(cluster, kpath, source), _identity(user, upath, source), source,
                      str(ctx.get("namespace") or "default"), cluster)


def service_account(folder: Path = SERVICE_ACCOUNT) -> Kubeconfig:
    """The pod's own identity: its projected token (re-read as the kubelet rotates it)
    and the cluster CA, at the address Kubernetes puts in every pod's environment."""
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST", ""), os.environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise KubeconfigError("in-cluster: KUBERNETES_SERVICE_HOST/PORT are not set")
    host = f"[{host}]" if ":" in host else host
    source = "in-cluster service account"
    token = folder / "token"
    if not token.is_file():
        raise KubeconfigError(f"{source}: no token at {token}")
    ns = folder / "namespace"
    return Kubeconfig(Server(f"https://{host}:{port}", _pem(None, str(folder / "ca.crt"), token, source)),
                      Identity(token_file=str(token)), source,
                      ns.read_text().strip() if ns.is_file() else "default")


def _member_file(cluster: Mapping[str, Any], user: Mapping[str, Any], source: str, allow_exec: bool) -> None:
    bad = memberfile.refused(cluster, user, allow_exec)
    if bad is not None:
        raise KubeconfigError(f"{source}: {bad[1]}", refused=bad[0])


def shown(url: str) -> str:
    """`url` without its user info (`https://user:pw@host` -> `https://host`): how a URL is
    shown in a message."""
    return _USERINFO.sub(lambda m: m.group(1) or "", url, count=1)


def boolean(d: Mapping[str, Any], key: str, source: str) -> bool:
    """A YAML boolean (absent: false); anything else is refused, as kubectl refuses it."""
    v = d.get(key)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise KubeconfigError(f"{source}: {key} must be true or false, not a {type(v).__name__} "
                              f"({str(v)[:40]!r})")
    return v


def _text(d: Mapping[str, Any], key: str, source: str) -> str | None:
    v = d.get(key)
    if v is None or v == "":
        return None
    if not isinstance(v, str):
        raise KubeconfigError(f"{source}: {key} is not a string")
    return v


def _file(path: str | None, base: Path) -> str | None:
    if path is None:
        return None
    p = Path(path).expanduser()
    return str(p if p.is_absolute() else base.parent / p)


def _pem(data: str | None, path: str | None, base: Path, source: str, what: str = "") -> str | None:
    """PEM text from base64 `data` or the file at `path` (relative to the folder of `base`,
    the file that names it)."""
    if data is not None:
        try:
            return base64.b64decode(data, validate=True).decode()
        except ValueError as e:
            raise KubeconfigError(f"{source}: {what or 'certificate'} data is not base64 PEM") from e
    if path is None:
        return None
    p = Path(_file(path, base) or path)
    try:
        return p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise KubeconfigError(f"{source}: cannot read {what or 'certificate'} {p}: "
                              f"{getattr(e, 'strerror', None) or e}") from e


def _server(c: Mapping[str, Any], path: Path, source: str) -> Server:
    url = _text(c, "server", source)
    try:
        u = urlsplit(url or "")
    except ValueError:
        u = None
    if (not url or not url.startswith(("https://", "http://")) or u is None
            or ("@" not in u.netloc and _USERINFO.match(url))):  # an @ after a / : user info, mangled
        raise KubeconfigError(f"{source}: cluster server {shown(url or '')!r} is not an http(s) URL")
    insecure = boolean(c, "insecure-skip-tls-verify", source)
    boolean(c, "disable-compression", source)  # checked; nothing is compressed
    ca_data = _text(c, "certificate-authority-data", source)
    ca_file = _text(c, "certificate-authority", source)
    if insecure and (ca_data or ca_file):
        raise KubeconfigError(f"{source}: {INSECURE_WITH_CA}")
    ca = _pem(ca_data, ca_file, path, source, "certificate-authority")
    basic = None
    if "@" in u.netloc:
        basic = unquote(u.username or ""), unquote(u.password or "")
        url = shown(url)
    return Server(url.rstrip("/"), ca, insecure, _text(c, "tls-server-name", source),
                  _text(c, "proxy-url", source), basic)


def _identity(u: Mapping[str, Any], path: Path, source: str) -> Identity:
    if u.get("auth-provider"):
        name = (u["auth-provider"] or {}).get("name", "?") if isinstance(u["auth-provider"], dict) else "?"
        raise KubeconfigError(f"{source}: auth-provider {name} is not supported; use an exec "
                              "credential plugin (as kubectl does since 1.26)")
    ex = _exec(u.get("exec"), path, source)
    cert = _pem(_text(u, "client-certificate-data", source), _text(u, "client-certificate", source),
                path, source, "client-certificate")
    key = _pem(_text(u, "client-key-data", source), _text(u, "client-key", source),
               path, source, "client-key")
    if (cert is None) != (key is None):  # as kubectl's validation
        raise KubeconfigError(f"{source}: a client certificate needs its key, and a key its certificate")
    return Identity(
        token=_text(u, "token", source), token_file=_file(_text(u, "tokenFile", source), path),
        username=_text(u, "username", source), password=_text(u, "password", source),
        cert=cert, key=key, exec=ex, impersonate=_impersonation(u, source))


def _exec(ex: Any, path: Path, source: str) -> Mapping[str, Any] | None:
    """The exec stanza, checked as client-go checks it before it runs the plugin."""
    if ex is None:
        return None
    if not isinstance(ex, dict) or not isinstance(ex.get("command"), str) or not ex["command"]:
        raise KubeconfigError(f"{source}: exec has no command")
    if ex.get("apiVersion") not in EXEC_VERSIONS:
        raise KubeconfigError(f"{source}: exec plugin: invalid apiVersion {str(ex.get('apiVersion'))[:60]!r} "
                              f"(expected {' or '.join(EXEC_VERSIONS)})")
    boolean(ex, "provideClusterInfo", f"{source}: exec")
    if os.sep in ex["command"]:  # as kubectl: a relative path is the file's
        ex = {**ex, "command": _file(ex["command"], path)}
    return dict(ex)


def _impersonation(u: Mapping[str, Any], source: str) -> Impersonation | None:
    """`as`, `as-uid`, `as-groups`, `as-user-extra`; the last three only with `as`."""
    user, uid = _header_value(u, "as", source), _header_value(u, "as-uid", source)
    groups, extra = u.get("as-groups") or [], u.get("as-user-extra") or {}
    if not isinstance(groups, list) or not isinstance(extra, dict):
        raise KubeconfigError(f"{source}: as-groups is a list and as-user-extra a mapping of lists")
    if user is None:
        if uid or groups or extra:
            raise KubeconfigError(f"{source}: requesting uid, groups or user-extra without impersonating "
                                  "a user (as)")
        return None
    out = []
    for k, vs in extra.items():
        if not isinstance(k, str) or not k or not isinstance(vs, list):
            raise KubeconfigError(f"{source}: as-user-extra is a mapping of names to lists of strings")
        out.append((k, tuple(_header_value({"as-user-extra": v}, "as-user-extra", source) or "" for v in vs)))
    return Impersonation(user, uid, tuple(_header_value({"as-groups": g}, "as-groups", source) or ""
                                          for g in groups), tuple(out))


def _header_value(d: Mapping[str, Any], what: str, source: str) -> str | None:
    """A string sent in a header: no control characters."""
    v = _text(d, what, source)
    if v is not None and _CONTROL.search(v):
        raise KubeconfigError(f"{source}: {what} holds a control character")
    return v
