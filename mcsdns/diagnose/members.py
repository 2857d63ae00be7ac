"""The clusters `mcsdns diagnose` and `mcsdns show` read: one cluster (`--kubeconfig`,
`--context`: what `mcsdns serve` sees), the members named by hand (`--cluster`), or the
whole clusterset as the controller knows it: its members directory (`--members-dir`, as
`mcsdns controller --members-dir` takes it) or its members Secret (`--members-secret`,
read from the --kubeconfig/--context cluster, the controller's, which is then member
`local` as deploy/ names it). Member files are loaded as the controller loads them
(`controller.member.live`): data only, exec plugins refused. Only the Secret or directory
gives every member (`complete`); a subset named by hand is never taken for the clusterset."""

from __future__ import annotations

import argparse
import base64
import binascii
import os
import tempfile
from dataclasses import dataclass, field

from ..controller.member.directory import MembersDir
from ..controller.member.live import Membership
from ..kube.apiclient.client import Client
from ..kube.apiclient.errors import ApiError, NotFound
from ..kube.config import connect, parse_cluster
from ..kube.resources import SECRETS
from ..ops.errors import ConfigError
from .checks import FAIL, WARN, Result
from .collect import why

LOCAL = "local"  # the controller's own cluster, as deploy/controller/deployment.yaml names it
POOL = 32


@dataclass
class Clusters:
    """The clusters to read, by name in the order given, and what they stand for."""

    clients: dict[str, Client] = field(default_factory=dict)
    clusterset: bool = False  # the controller's members (else one cluster, as `mcsdns serve` sees it)
    complete: bool = False  # every member: from the members Secret or directory
    files: set[str] = field(default_factory=set)  # read with their member file: the controller's identity
    problems: list[Result] = field(default_factory=list)  # member files not loaded, or skipped


def read(args: argparse.Namespace) -> Clusters:
    """The clusters the flags name; ConfigError (one line, naming the flag) when they do not."""
    secret, folder = args.members_secret, args.members_dir
    by_hand = bool(args.kubeconfig or args.context)
    if args.cluster and by_hand:
        raise ConfigError("--cluster: give either --cluster (a clusterset) or --kubeconfig/--context "
                          "(one cluster), not both")
    if secret and folder:
        raise ConfigError("--members-secret: give either --members-secret or --members-dir, not both")
    if secret and args.cluster:
        raise ConfigError("--members-secret: it is read from the --kubeconfig/--context cluster (the "
                          "controller's), not with --cluster")
    out = Clusters(clusterset=bool(args.cluster or secret or folder), complete=bool(secret or folder))
    for spec in args.cluster:
        name, kubeconfig, context = parse_cluster(spec)
        if name in out.clients:
            raise ConfigError(f"--cluster {name}: the name is given twice (names must be unique)")
        out.clients[name] = connect(kubeconfig, context, pool=POOL, member=name)
    if not args.cluster and (by_hand or secret or not folder):
        name = LOCAL if out.clusterset else args.context or "cluster"
        out.clients[name] = c = connect(args.kubeconfig, args.context, pool=POOL)
        c.name = name
    if folder:
        if not os.path.isdir(folder):
            raise ConfigError(f"--members-dir {folder}: no such directory")
        _load(out, folder, f"--members-dir {folder}")
    elif secret:
        _from_secret(out, out.clients[LOCAL], secret)
    return out


def _from_secret(out: Clusters, c: Client, secret: tuple[str, str]) -> None:
    """Each key of the Secret, a member file, loaded from a private folder."""
    ns, name = secret
    flag = f"--members-secret {ns}/{name}"
    try:
        obj = c.get(SECRETS.path(ns, name))
    except NotFound:
        raise ConfigError(f"{flag}: no such Secret in {c.host}") from None
    except (ApiError, ValueError) as e:
        raise ConfigError(f"{flag}: cannot read it from {c.host}: {why(e)}") from None
    data = obj.get("data") if isinstance(obj, dict) else None
    with tempfile.TemporaryDirectory(prefix="mcsdns-members-") as tmp:
        for key, value in (data if isinstance(data, dict) else {}).items():
            try:
                text = base64.b64decode(str(value), validate=True)
            except (binascii.Error, ValueError):
                out.problems.append(Result(FAIL, "members", str(key), "", f"{flag} key {key}: not base64"))
                continue
            if os.path.basename(str(key)) == str(key) and not str(key).startswith("."):
                with open(os.open(os.path.join(tmp, str(key)), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600),
                          "wb") as f:
                    f.write(text)
        _load(out, tmp, f"{flag} key", tmp)


def _load(out: Clusters, folder: str, origin: str, hide: str = "") -> None:
    """The member files of `folder`, as the controller loads them; `hide`: a path that stands
    for `origin` in messages."""
    d = MembersDir(folder)
    if d.watch is not None:
        d.watch.close()
    ms = Membership(None, d, set(out.clients), POOL)
    names = sorted(d.scan())
    for name in sorted(d.skipped):
        out.problems.append(Result(WARN, "members", name, "", f"{origin} {name}: skipped, as the controller "
                                   "skips it (see the warning above)"))
    for name in names:
        if name in out.clients:
            raise ConfigError(f"{origin} {name}: {name} is also given by --cluster or --kubeconfig")
        try:
            client = ms.load(name).client
        except ConfigError as e:
            text = str(e).removeprefix(f"--members-dir {d.file(name)}: ")
            text = text.replace(f"{hide}/", "") if hide else text
            out.problems.append(Result(FAIL, "members", name, "", f"{origin} {name}: {text}; the controller "
                                       "does not load it either"))
            continue
        assert client is not None
        out.clients[name] = client
        out.files.add(name)
