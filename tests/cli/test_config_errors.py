"""Configuration errors: for every flag of `serve`, `records` and `controller`, a bad value
ends the process with status 2 and one line on stderr naming the flag, the value and the
reason, never a traceback. A manifests directory that becomes unreadable later keeps being
served, like an API outage."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.helpers import EXAMPLE, REPO, copy_example, run_server, wait_for

from mcsdns.cli import build_parser


@dataclass(frozen=True)
class Case:
    """`mcsdns ARGS` must fail naming `flag` and `value` (placeholders: see `paths`)."""

    args: tuple[str, ...]
    flag: str
    value: str
    reason: str  # a part of the message


def case(cmd: str, flag: str, value: str, reason: str, *more: str) -> Case:
    """`mcsdns CMD [MORE...] FLAG VALUE`; MORE gets the process past parsing where needed."""
    base = {"serve": ("serve",) if flag == "--listen" else ("serve", "--listen", "127.0.0.1:0"),
            "records": ("records",),
            "controller": ("controller", "--cluster", "a={kubeconfig}"),
            "diagnose": ("diagnose",), "join": ("join", "west", "--output", "-"),
            "leave": ("leave", "west"), "show": ("show",)}[cmd]
    if value == "<none>":  # the value missing
        return Case((*base, *more, flag), flag, "", reason)
    if value.startswith("="):  # a value given to a flag that takes none
        return Case((*base, *more, flag + value), flag, value[1:], reason)
    return Case((*base, *more, flag, value), flag, value, reason)


EX = str(EXAMPLE)
SOURCE = [  # flags shared by serve and records
    ("--zone", "clusterset..local", "empty label"),
    ("--zone", "a" * 64 + ".local", "over 63"),
    ("--ttl", "-1", "from 0 to 2147483647"),
    ("--ttl", "2147483648", "from 0 to 2147483647"),
    ("--manifests", "{missing}", "no such directory"),
    ("--manifests", "{file}", "not a directory"),
    ("--manifests", "{dangling}", "no such directory"),
    ("--max-manifest-bytes", "0", "from 1 to"),
    ("--kubeconfig", "{missing}", "No such file or directory"),
    ("--kubeconfig", "{dir}", "a directory, not a file"),
    ("--kubeconfig", "{file}", "cannot load kubeconfig"),
    ("--context", "", "non-empty"),
    ("--namespace", "Bad_NS", "DNS label"),
    ("--cluster-id", "Bad_ID", "cluster ID"),
    ("--region", "bad region", "label value"),
    ("--topology-zone", "zone/1", "label value"),
    ("--cluster-region", "east", "CLUSTER=REGION"),
    ("--prefer-local", "nearest", "expected one of order, only-when-available"),
    ("--terminating-fallback", "=yes", "ignored explicit argument"),
    ("--log-level", "debugg", "expected one of debug"),
    ("--log-format", "xml", "expected one of text, json"),
]
CASES = [
    *(case("serve", f, v, r) for f, v, r in SOURCE),
    *(case("records", f, v, r) for f, v, r in SOURCE),
    case("serve", "--listen", "127.0.0.1:99999", "port must be 0-65535"),
    case("serve", "--listen", "localhost", "expected HOST:PORT"),
    case("serve", "--listen", "<none>", "expected one argument"),
    case("serve", "--listen", "{busy_tcp}", "TCP: Address already in use", "--manifests", EX),
    case("serve", "--listen", "{busy_tcp}", "TCP: Address already in use", "--manifests", EX,
         "--listen", "127.0.0.1:0"),
    case("serve", "--listen", "{busy_udp}", "UDP: Address already in use", "--manifests", EX),
    case("serve", "--listen", "{busy_tcp}", "TCP: Address already in use", "--kubeconfig", "{kubeconfig}",
         "--workers", "2"),  # checked before the first sync (the API here is dead)
    case("serve", "--listen", "{busy_tcp}", "TCP: Address already in use", "--manifests", EX,
         "--workers", "2", "--log-level", "warning"),
    case("serve", "--health", "127.0.0.1:65536", "port must be 0-65535"),
    case("serve", "--health", "{busy_tcp}", "Address already in use", "--manifests", EX),
    case("serve", "--metrics", "{busy_tcp}", "Address already in use", "--manifests", EX),
    case("serve", "--metrics", "{busy_tcp}", "Address already in use", "--manifests", EX,
         "--workers", "2"),
    case("serve", "--tcp-max-conns", "0", "from 1 to"),
    case("serve", "--tcp-max-conns-per-client", "many", "from 1 to"),
    case("serve", "--tcp-idle-timeout", "-1", "seconds above 0"),
    case("serve", "--tcp-read-timeout", "nan", "seconds above 0"),
    case("serve", "--workers", "0", "from 1 to"),
    case("serve", "--log-queries", "=yes", "ignored explicit argument"),
    case("serve", "--reuse-port", "=yes", "ignored explicit argument"),
    case("serve", "--lameduck", "-1", "seconds 0 or more"),
    case("serve", "--cache-size", "-1", "from 0 to"),
    case("serve", "--state-dir", "{file}", "not a directory"),
    case("serve", "--state-interval", "-5", "seconds 0 or more"),
    case("serve", "--allow-transfer", "10.0.0.0/33", "address or CIDR"),
    case("serve", "--notify", "10.0.0.1", "expected HOST:PORT"),
    case("serve", "--tsig-key-file", "{missing}", "No such file or directory"),
    case("serve", "--tsig-key-file", "{file}", "no keys", "--manifests", EX),
    # after the lists were asked for (ops/load.py, stage 1; the API here is dead): still one line
    case("serve", "--tsig-key-file", "{file}", "no keys", "--kubeconfig", "{kubeconfig}"),
    case("serve", "--context", "nope", "cannot load kubeconfig", "--kubeconfig", "{kubeconfig}"),
    Case(("serve", "--listen", "127.0.0.1:0", "--manifests", EX, "--tsig-key", "k:hmac-sha999:c2VjcmV0"),
         "--tsig-key", "hmac-sha999", "unsupported algorithm"),  # the secret is not repeated
    case("serve", "--tsig-allow-weak", "=yes", "ignored explicit argument"),
    case("records", "--timeout", "0", "seconds above 0"),
    case("controller", "--cluster", "a", "expected NAME=KUBECONFIG[@CONTEXT]"),
    case("controller", "--cluster", "b={file}", "cannot load kubeconfig"),
    case("controller", "--cluster-id", "zz=east", "NAME one of ['a']"),
    case("controller", "--cluster-id", "a=Not_An_ID", "not a valid cluster ID"),
    case("controller", "--clusterset-ip", "random", "expected one of derived, cidr"),
    case("controller", "--clusterset-cidr", "10.0.0.0/33", "address or CIDR"),
    case("controller", "--endpoint-ttl", "-1", "seconds above 0"),
    case("controller", "--import-grace", "-1", "seconds 0 or more"),
    case("controller", "--unreachable-after", "0", "seconds above 0"),
    case("controller", "--resync", "0", "seconds above 0"),
    case("controller", "--concurrent-reconciles", "0", "from 1 to"),
    case("controller", "--workers", "0", "from 1 to"),
    case("controller", "--leader-elect", "=yes", "ignored explicit argument"),
    case("controller", "--lease-namespace", "Kube_System", "DNS label"),
    case("controller", "--lease-name", "a..b", "DNS subdomain"),
    case("controller", "--lease-cluster", "b", "expected one of ['a']"),
    case("controller", "--lease-duration", "soon", "seconds above 0"),
    case("controller", "--writer-grace", "0", "seconds above 0"),
    case("controller", "--identity", "", "non-empty"),
    case("controller", "--health", "127.0.0.1:70000", "port must be 0-65535"),
    case("controller", "--health", "{busy_tcp}", "Address already in use", "--cluster-id", "a=east",
         "--log-level", "warning"),
    case("controller", "--metrics", "{busy_tcp}", "Address already in use", "--cluster-id", "a=east",
         "--log-level", "warning"),
    case("controller", "--once", "=yes", "ignored explicit argument"),
    case("controller", "--log-level", "loud", "expected one of debug"),
    case("controller", "--log-format", "yaml", "expected one of text, json"),
    case("controller", "--members-dir", "{missing}", "no such directory"),
    case("controller", "--members-dir", "{file}", "no such directory"),
    case("controller", "--members-allow-exec", "=yes", "ignored explicit argument"),
    case("controller", "--local", "b", "expected one of the --cluster names"),
    case("diagnose", "--members-secret", "x", "expected NAMESPACE/NAME"),
    case("diagnose", "--members-dir", "{missing}", "no such directory"),
    case("diagnose", "--service-account", "x", "expected NAMESPACE/NAME"),
    case("show", "--kubeconfig", "{missing}", "cannot load kubeconfig"),
    case("show", "--context", "nope", "cannot load kubeconfig", "--kubeconfig", "{kubeconfig}"),
    case("show", "--cluster", "a", "expected NAME=KUBECONFIG[@CONTEXT]"),
    case("show", "--members-secret", "x", "expected NAMESPACE/NAME"),
    case("show", "--members-dir", "{missing}", "no such directory"),
    case("show", "--service-account", "x", "expected NAMESPACE/NAME"),
    case("show", "--output", "yaml", "expected one of table, json"),
    case("show", "--json", "=yes", "ignored explicit argument"),
    case("join", "--read-only", "=yes", "ignored explicit argument"),
    case("leave", "--lease-kubeconfig", "{missing}", "cannot load kubeconfig", "--kubeconfig",
         "{kubeconfig}"),
    case("leave", "--lease-context", "nope", "cannot load kubeconfig", "--kubeconfig", "{kubeconfig}",
         "--lease-kubeconfig", "{kubeconfig}"),
    case("join", "--kubeconfig", "{missing}", "cannot load kubeconfig"),
    case("join", "--token-duration", "5m", "10 minutes at least", "--kubeconfig", "{kubeconfig}"),
    case("join", "--secret", "mcsdns-members", "expected NAMESPACE/NAME", "--kubeconfig", "{kubeconfig}"),
    case("join", "--context", "nope", "cannot load kubeconfig", "--kubeconfig", "{kubeconfig}"),
    case("join", "--namespace", "Bad_NS", "DNS label"),
    case("join", "--lease-namespace", "Bad_NS", "DNS label"),
    case("join", "--controller-kubeconfig", "{missing}", "cannot load kubeconfig", "--kubeconfig",
         "{kubeconfig}"),
    case("join", "--controller-context", "nope", "cannot load kubeconfig", "--kubeconfig", "{kubeconfig}",
         "--controller-kubeconfig", "{kubeconfig}"),
    case("join", "--server", "ftp://x", "an https:// or http:// URL"),
    case("join", "--output", "{dir}", "a directory, not a file", "--kubeconfig", "{kubeconfig}"),
    case("join", "--certificate-authority", "{missing}", "not PEM certificates", "--kubeconfig",
         "{kubeconfig}"),
    case("join", "--certificate-authority", "{file}", "not PEM certificates", "--kubeconfig", "{kubeconfig}"),
    case("join", "--insecure-skip-tls-verify", "=yes", "ignored explicit argument"),
    case("join", "--no-admission-policy", "=yes", "ignored explicit argument"),
    case("leave", "--kubeconfig", "{missing}", "cannot load kubeconfig"),
    case("leave", "--context", "nope", "cannot load kubeconfig", "--kubeconfig", "{kubeconfig}"),
    case("leave", "--namespace", "Bad_NS", "DNS label"),
    case("leave", "--lease-namespace", "Bad_NS", "DNS label"),
    case("leave", "--controller-kubeconfig", "{missing}", "cannot load kubeconfig", "--kubeconfig",
         "{kubeconfig}"),
    case("leave", "--controller-context", "nope", "cannot load kubeconfig", "--kubeconfig", "{kubeconfig}",
         "--controller-kubeconfig", "{kubeconfig}"),
    case("leave", "--secret", "x", "expected NAMESPACE/NAME"),
    case("leave", "--purge-imports", "=yes", "ignored explicit argument"),
    case("leave", "--force", "=yes", "ignored explicit argument"),
    case("leave", "--output", "{dir}", "a directory, not a file", "--kubeconfig", "{kubeconfig}"),
    case("diagnose", "--kubeconfig", "{missing}", "cannot load kubeconfig"),
    case("diagnose", "--context", "nope", "cannot load kubeconfig", "--kubeconfig", "{kubeconfig}"),
    case("diagnose", "--cluster", "a", "expected NAME=KUBECONFIG[@CONTEXT]"),
    case("diagnose", "--dns", "x=127.0.0.1:53", "x is not one of the clusters",
         "--kubeconfig", "{kubeconfig}"),
    case("diagnose", "--dns", "127.0.0.1:99999", "port must be 0-65535", "--kubeconfig", "{kubeconfig}"),
    case("diagnose", "--zone", "clusterset..local", "empty label"),
    case("diagnose", "--output", "yaml", "expected one of text, json"),
    Case(("bogus",), "command", "bogus", "expected one of serve, records, controller"),
]


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Placeholder values: paths of each kind, a kubeconfig of a dead API, busy ports."""
    tmp = tmp_path_factory.mktemp("cfg")
    (tmp / "file").write_text("")
    (tmp / "dir").mkdir()
    (tmp / "dangling").symlink_to(tmp / "gone")
    kc = tmp / "kubeconfig"
    kc.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen()
    udp = socket.socket(type=socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    yield {"missing": str(tmp / "missing"), "file": str(tmp / "file"), "dir": str(tmp / "dir"),
           "dangling": str(tmp / "dangling"), "kubeconfig": str(kc),
           "busy_tcp": f"127.0.0.1:{tcp.getsockname()[1]}",
           "busy_udp": f"127.0.0.1:{udp.getsockname()[1]}"}
    tcp.close()
    udp.close()


@pytest.fixture(scope="module")
def results(paths: dict[str, str]) -> dict[Case, subprocess.CompletedProcess[str]]:
    """Every case run as `python -m mcsdns`, two at a time, by tests/support/forkrun.py: it imports
    mcsdns once and forks per case, so a case costs its own work, not an interpreter start
    (101 interpreters, eight at once, timed out under load)."""
    argvs = [[a.format(**paths) for a in c.args] for c in CASES]
    run = subprocess.run([sys.executable, str(REPO / "tests" / "support" / "forkrun.py"), "2", "60"],
                         input=json.dumps(argvs), cwd=REPO, capture_output=True, text=True, check=True,
                         timeout=60 * len(CASES))
    return {c: subprocess.CompletedProcess(argv, code, out, err)
            for c, argv, (code, out, err) in zip(CASES, argvs, json.loads(run.stdout), strict=True)}


@pytest.mark.parametrize("c", CASES, ids=[" ".join(c.args[:1] + c.args[-2:]) for c in CASES])
def test_bad_flag_is_one_line_and_exit_2(c: Case, paths: dict[str, str],
                                         results: dict[Case, subprocess.CompletedProcess[str]]) -> None:
    r = results[c]
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, (r.returncode, r.stderr)
    line = lines[0]
    assert "Traceback" not in r.stderr
    assert line.startswith(f"mcsdns: {c.flag}"), line
    assert c.value.format(**paths) in line and c.reason in line, line


def test_every_flag_is_covered() -> None:
    """The table above has a case for every option of every subcommand."""
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert isinstance(sub.choices, dict)
    covered = {(c.args[0], c.flag) for c in CASES}
    for cmd, parser in sub.choices.items():
        for action in parser._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help", "--version"):  # --version: tests/ops/test_logs_version.py
                    assert (cmd, flag) in covered, f"no bad-value case for {cmd} {flag}"


def test_manifests_directory_unreadable_later_is_an_outage(tmp_path: Path) -> None:
    """Replaced by a file, then removed: the last good data stays served and /ready stays
    200; a warning once per outage and a notice when readable again; connected 0 and
    errors{error="dir_unreadable"} counting meanwhile."""
    m = copy_example(tmp_path / "m")
    away = tmp_path / "away"
    connected = 'mcsdns_source_connected{source="files"}'
    with run_server(["--manifests", str(m)], tmp_path) as srv:
        name = "web.shop.svc.clusterset.local"
        want = srv.query(name).answer
        assert want and srv.metric(connected) == 1
        for outage in (1, 2):
            m.rename(away)
            if outage == 1:
                m.write_text("not a directory")
            assert wait_for(lambda: srv.metric(connected) == 0)
            assert wait_for(lambda: srv.metric_sum("mcsdns_source_errors_total",
                                                   'source="files"', 'error="dir_unreadable"') >= 2)
            assert srv.http("/ready")[0] == 200
            assert srv.query(name).answer == want
            assert srv.logs().count("cannot be read") == outage
            if outage == 1:
                m.unlink()
            else:
                shutil.rmtree(m, ignore_errors=True)
            away.rename(m)
            assert wait_for(lambda: srv.metric(connected) == 1)
            assert srv.logs().count("can be read again") == outage
            assert srv.query(name).answer == want
