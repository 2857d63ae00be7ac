"""`mcsdns join` and `mcsdns leave`'s flags; mcsdns.members is imported only when they run."""

from __future__ import annotations

import argparse
import re
from typing import Any

from . import flags

TOKEN_DAYS = 30  # the default --token-duration (docs/deploy.md, "Rotating member tokens")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"(\d+)([smhd]?)")


def duration(s: str) -> int:
    """`8760h`, `365d`, `90m`, `3600s` or plain seconds -> seconds (10 minutes at least, as
    the TokenRequest API takes them)."""
    m = _DURATION.fullmatch(s.strip())
    if m is None:
        raise argparse.ArgumentTypeError(f"{s}: expected a duration such as 8760h, 365d or 3600s")
    seconds = int(m.group(1)) * _UNITS[m.group(2) or "s"]
    if seconds < 600:
        raise argparse.ArgumentTypeError(f"{s}: a token lives 10 minutes at least")
    return seconds


def _url(s: str) -> bool:
    """An http(s) URL without user info (the member kubeconfig carries no password)."""
    return s.startswith(("https://", "http://")) and len(s) > len("https://") \
        and "@" not in s.split("://", 1)[1].split("/", 1)[0]


def secret_name(s: str) -> tuple[str, str]:
    """NAMESPACE/NAME -> (namespace, name)."""
    ns, sep, name = s.partition("/")
    if not sep or not ns or not name:
        raise argparse.ArgumentTypeError(f"{s}: expected NAMESPACE/NAME")
    return ns, name


def _join(args: argparse.Namespace) -> int:
    from .members.cli import join_main

    return join_main(args)


def _leave(args: argparse.Namespace) -> int:
    from .members.cli import leave_main

    return leave_main(args)


def _common(p: argparse.ArgumentParser, verb: str) -> None:
    p.add_argument("member", metavar="NAME", type=flags.dns_label,
                   help="the member's name: its key in the members Secret, its file in --members-dir "
                        "(a DNS label)")
    p.add_argument("--kubeconfig", metavar="PATH", help=f"an admin kubeconfig of the member to {verb} "
                   "(default $KUBECONFIG or ~/.kube/config)")
    p.add_argument("--context", metavar="NAME", help="its context (default: the current one)")
    p.add_argument("--namespace", type=flags.dns_label, default="mcsdns-system",
                   help="the member namespace of the controller's ServiceAccount (default mcsdns-system)")
    lease = ("the member holds the controller's Leases (its --lease-cluster) in this namespace: also a "
             "Role for them there, bound to the ServiceAccount") if verb == "join" else (
        "the controller's --lease-namespace: the member's Lease mcsdns-member-NAME is deleted there in "
        "--lease-kubeconfig's cluster (default: looked for in mcsdns-system and kube-system); join's "
        "lease Role there in the member goes too")
    p.add_argument("--lease-namespace", type=flags.dns_label, metavar="NAMESPACE", help=lease)
    p.add_argument("--controller-kubeconfig", metavar="PATH",
                   help="a kubeconfig of the cluster running the controller: its members Secret "
                        "gets (join) or loses (leave) the key NAME")
    p.add_argument("--controller-context", metavar="NAME", help="its context (default: the current one)")
    p.add_argument("--secret", type=secret_name, default=("mcsdns-system", "mcsdns-members"),
                   metavar="NAMESPACE/NAME", help="the members Secret (default mcsdns-system/mcsdns-members)")


def _tls(j: argparse.ArgumentParser) -> None:
    """How the member kubeconfig trusts the member's API server."""
    j.add_argument("--certificate-authority", metavar="FILE",
                   help="PEM CA certificates the member kubeconfig verifies the server with (inlined; "
                        "default: the admin kubeconfig's CA)")
    j.add_argument("--insecure-skip-tls-verify", action="store_true",
                   help="write insecure-skip-tls-verify: true into the member kubeconfig (no CA): the "
                        "controller will not verify the server. Without it, an admin kubeconfig that skips "
                        "verification and has no CA is refused")


def add_parsers(sub: Any) -> None:
    """Add the `join` and `leave` subcommands."""
    j = sub.add_parser("join", help="onboard a member: its account, RBAC and kubeconfig (idempotent)",
                       description="Create in a member cluster (with its admin kubeconfig) the namespace, "
                       "the controller's ServiceAccount, ClusterRole and binding, and a token; write the "
                       "member kubeconfig to a file or to the members Secret. Re-run it to rotate the token. "
                       "Everything it makes is labelled mcsdns.io/member=NAME; a cluster joined under "
                       "another name is refused (exit 2) until that name leaves.")
    _common(j, "join")
    j.add_argument("--server", metavar="URL",
                   type=flags.checked("an https:// or http:// URL without user@", _url),
                   help="the member's API address as the controller reaches it "
                   "(default: the admin kubeconfig's)")
    j.add_argument("--token-duration", type=duration, default=TOKEN_DAYS * 86400, metavar="DURATION",
                   help=f"lifetime asked of the token (TokenRequest; default {TOKEN_DAYS * 24}h, "
                        f"{TOKEN_DAYS} days: a leaked token is good for a month at most, and the expiry "
                        "alert, firing with a fifth left, gives a failed monthly rotation 6 days to be "
                        "fixed; the server may cap it): run join again before it ends")
    j.add_argument("--no-admission-policy", dest="admission_policy", action="store_false",
                   help="do not install the ValidatingAdmissionPolicy that limits the token's writes to the "
                        "controller's own objects (installed by default where the API server serves it, "
                        "Kubernetes 1.30+)")
    j.add_argument("--read-only", action="store_true",
                   help="a read-only credential instead, for `mcsdns controller --local` running in another "
                        "member: ServiceAccount, ClusterRole and binding mcsdns-reader (get, list, watch of "
                        "Services, EndpointSlices and ServiceExports; get of namespaces and the cluster ID); "
                        "no admission policy and no Lease Role")
    j.add_argument("--output", metavar="FILE", help="write the member kubeconfig here (mode 0600; - for "
                   "stdout)")
    _tls(j)
    j.set_defaults(func=_join)
    lv = sub.add_parser("leave", help="remove a member, its credentials and RBAC (on request its imports)",
                        description="Undo `mcsdns join`: the key of the members Secret (the controller "
                        "drops the member), then in the member the binding, the ServiceAccount (its tokens "
                        "stop working), the lease Roles, the ClusterRole when nothing else binds it and each "
                        "namespace join made once it holds nothing else, and join's admission policy: only "
                        "what join made for NAME (labelled mcsdns.io/member=NAME); then each ServiceExport "
                        "in the member gets Ready=False (reason MemberLeft) and the member's Lease goes. A "
                        "cluster joined under another name, or not at all, is refused (exit 2) before "
                        "anything is deleted.")
    _common(lv, "leave")
    lv.add_argument("--force", action="store_true",
                    help="also remove join's objects that record no member name (made by a join older than "
                         "0.2.0) as NAME's; with --lease-namespace, the old Role and RoleBinding "
                         "mcsdns-controller-lease there when they bind join's ServiceAccount alone")
    lv.add_argument("--purge-imports", action="store_true",
                    help="also delete in the member the ServiceImports, derived Services and EndpointSlices "
                         "the controller made there")
    lv.add_argument("--output", metavar="FILE", help="delete this member kubeconfig file")
    lv.add_argument("--lease-kubeconfig", metavar="PATH",
                    help="a kubeconfig of the cluster holding the controller's Leases (its --lease-cluster): "
                         "the member's Lease is deleted there (default: --controller-kubeconfig's cluster)")
    lv.add_argument("--lease-context", metavar="NAME", help="its context (default: the current one)")
    lv.set_defaults(func=_leave)
