"""TSIG against hostile clients (RFC 8945), over real sockets to a live `mcsdns serve`:
no MAC recovered octet by octet, no answer that depends on how much of a MAC was right,
the clock-skew window capped whatever the sender's fudge; and the keys' configuration
end to end (key files in BIND's, knot's and the line format, the environment, weak
algorithms)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import dns.message
import dns.query
import dns.rcode
import dns.tsig
import dns.tsigkeyring
import pytest
from support.helpers import EXAMPLE, REPO, Server, run_server
from support.ports import free_port

sys.path.insert(0, str(REPO))

from robustness.packets import wire_name  # noqa: E402
from robustness.tsig_forge import axfr_request, verdict  # noqa: E402

ZONE = "clusterset.local."
NAME = "web.shop.svc.clusterset.local."
SECRET = base64.b64encode(b"mcsdns-tsig-security-key-0123456").decode()
KEY = f"xfr-key:hmac-sha256:{SECRET}"
SERVE = ["--manifests", str(EXAMPLE), "--allow-transfer", "127.0.0.0/8"]


def secret(seed: str) -> str:
    return base64.b64encode(hashlib.sha256(seed.encode()).digest()).decode()


def true_mac(key: bytes, msg: bytes, key_name: str, time_signed: int, fudge: int) -> bytes:
    """The hmac-sha256 MAC of an `axfr_request` message whose ID is its original ID
    (RFC 8945 4.3: the message without its TSIG RR, ARCOUNT 0, then the TSIG variables)."""
    unsigned = msg[:10] + b"\x00\x00" + msg[12:12 + len(wire_name(ZONE)) + 4]
    variables = (wire_name(key_name) + struct.pack("!HI", 255, 0) + wire_name("hmac-sha256")
                 + struct.pack("!HIHHH", time_signed >> 32, time_signed & 0xFFFFFFFF, fudge, 0, 0))
    return hmac.new(key, unsigned + variables, hashlib.sha256).digest()


def send(srv: Server, msg: bytes, tcp: bool) -> bytes:
    return srv.exchange(msg, tcp)


def test_octet_by_octet_forgery_fails(tmp_path: Path) -> None:
    with run_server([*SERVE, "--tsig-key", KEY], tmp_path) as srv:
        out = subprocess.run([sys.executable, "robustness/tsig_forge.py", "--server", f"127.0.0.1:{srv.port}",
                              "--key-name", "xfr-key", "--max-queries", "4096", "--time-limit", "20"],
                             cwd=REPO, capture_output=True, text=True, timeout=60, check=True)
        result = json.loads(out.stdout)
        assert result["recovered"] is False and result["axfr"] is False, result
        assert result["octets"] == 0 and result["first_octet_answers"] == {"FORMERR/none": 256}, result
        # The key holder's view: a right prefix is answered exactly as a wrong one, at every length
        # short of the whole MAC (FORMERR under 16 octets, BADTRUNC from 16), and over it.
        now = int(time.time())
        unsigned = axfr_request(ZONE, "xfr-key", "hmac-sha256", b"", 4242, 4242, now, 300)
        mac = true_mac(base64.b64decode(SECRET), unsigned, "xfr-key", now, 300)
        wrong = bytes((mac[0] ^ 0x55,)) + mac[1:]
        for tcp in (False, True):
            for n in (1, 9, 10, 15, 16, 17, 31, 33):
                right_mac, wrong_mac = (mac[:n], wrong[:n]) if n <= 32 else (mac + b"\0", wrong + b"\0")
                right = send(srv, axfr_request(ZONE, "xfr-key", "hmac-sha256", right_mac, 7, 4242, now, 300),
                             tcp)
                other = send(srv, axfr_request(ZONE, "xfr-key", "hmac-sha256", wrong_mac, 7, 4242, now, 300),
                             tcp)
                assert right == other, (tcp, n, verdict(right), verdict(other))
                assert verdict(right) == ("NOTAUTH/BADTRUNC" if 16 <= n < 32 else "FORMERR/none"), (tcp, n)
            # the whole MAC: right verifies (the MAC above is the real one), wrong is BADSIG
            good = send(srv, axfr_request(ZONE, "xfr-key", "hmac-sha256", mac, 7, 4242, now, 300), tcp)
            assert verdict(good).endswith("/NOERROR"), verdict(good)
            bad = send(srv, axfr_request(ZONE, "xfr-key", "hmac-sha256", wrong, 7, 4242, now, 300), tcp)
            assert verdict(bad) == "NOTAUTH/BADSIG"


def test_senders_fudge_does_not_widen_the_time_window(tmp_path: Path) -> None:
    ring = dns.tsigkeyring.from_text({"xfr-key.": ("hmac-sha256", SECRET)})

    def signed(rdtype: str, age: float) -> bytes:
        q = dns.message.make_query(ZONE, rdtype)
        q.use_tsig(ring, keyname="xfr-key.", fudge=65535)
        with mock.patch("time.time", return_value=time.time() - age):
            return q.to_wire()

    with run_server([*SERVE, "--tsig-key", KEY], tmp_path) as srv:
        for tcp, rdtype in ((False, "SOA"), (True, "SOA"), (True, "AXFR")):
            r = dns.message.from_wire(send(srv, signed(rdtype, 7200), tcp), keyring=False)
            assert (r.rcode(), r.tsig_error) == (dns.rcode.NOTAUTH, dns.rcode.BADTIME), (tcp, rdtype)
            assert r.tsig is not None and len(r.tsig[0].mac) == 32 and not r.answer
            r = dns.message.from_wire(send(srv, signed(rdtype, 400), tcp), keyring=False)
            assert r.tsig_error == dns.rcode.BADTIME  # over 300 s whatever the fudge
            r = dns.message.from_wire(send(srv, signed(rdtype, 200), tcp), keyring=False)
            assert (r.rcode(), r.tsig_error) == (dns.rcode.NOERROR, 0) and r.answer, (tcp, rdtype)


# --- configuration ---------------------------------------------------------------------------
def bind_file(path: Path, names: list[str]) -> Path:
    """Keys as BIND's tsig-keygen prints them (the real tool when installed)."""
    tool = shutil.which("tsig-keygen")
    if tool:
        path.write_text("".join(subprocess.run([tool, "-a", "hmac-sha256", n], capture_output=True,
                                               text=True, check=True).stdout for n in names))
    else:
        path.write_text("".join(f'key "{n}" {{\n\talgorithm hmac-sha256;\n\tsecret "{secret(n)}";\n}};\n'
                                for n in names))
    return path


def knot_file(path: Path, name: str) -> Path:
    """A key as knot's `keymgr -t` prints it (the real tool when installed)."""
    tool = shutil.which("keymgr")
    if tool:
        path.write_text(subprocess.run([tool, "-t", name, "hmac-sha256"], capture_output=True, text=True,
                                       check=True).stdout)
    else:
        path.write_text(f"# hmac-sha256:{name}:{secret(name)}\nkey:\n  - id: {name}\n"
                        f"    algorithm: hmac-sha256\n    secret: {secret(name)}\n")
    return path


def ring_of(path: Path) -> dict[str, tuple[str, str]]:
    """name -> (algorithm, secret) read independently of mcsdns: BIND's or knot's text."""
    out: dict[str, tuple[str, str]] = {}
    name = alg = ""
    for line in path.read_text().splitlines():
        s = line.strip().rstrip(";").replace('"', "")
        if s.startswith("key ") and s.endswith("{"):
            name = s.split()[1]
        elif s.startswith("- id:"):
            name = s.split(":", 1)[1].strip()
        elif s.startswith("algorithm"):
            alg = s.replace(":", " ").split()[-1]
        elif s.startswith("secret"):
            out[name] = (alg, s.replace(":", " ").split()[-1])
    return out


def verified(srv: Server, name: str, alg: str, key: str, tcp: bool = False) -> bool:
    """A query signed with the key gets an answer whose TSIG dnspython verifies."""
    ring = dns.tsigkeyring.from_text({name + ".": (alg, key)})
    q = dns.message.make_query(NAME, "A")
    q.use_tsig(ring, keyname=name + ".", algorithm=alg)
    try:
        r = (dns.query.tcp if tcp else dns.query.udp)(q, "127.0.0.1", port=srv.port, timeout=3)
    except (dns.tsig.PeerError, dns.message.UnknownTSIGKey, dns.tsig.BadSignature):
        return False
    return bool(r.had_tsig and r.rcode() == dns.rcode.NOERROR and r.answer)


def test_key_files_in_bind_knot_and_line_formats_and_notify_signed_with_the_first(tmp_path: Path) -> None:
    bind = bind_file(tmp_path / "bind.key", ["bind-a", "bind-b"])
    knot = knot_file(tmp_path / "knot.conf", "knot-a")
    lines = tmp_path / "keys.txt"
    lines.write_text(f"# NAME:ALGORITHM:BASE64SECRET\n\nline-a:hmac-sha512:{secret('l')}  # comment\n")
    keys = {**ring_of(bind), **ring_of(knot), "line-a": ("hmac-sha512", secret("l"))}
    assert list(keys) == ["bind-a", "bind-b", "knot-a", "line-a"]
    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as secondary:
        secondary.bind(("127.0.0.1", port))
        secondary.settimeout(5)
        with run_server([*SERVE, "--tsig-key-file", str(bind), "--tsig-key-file", str(knot),
                         "--tsig-key-file", str(lines), "--notify", f"127.0.0.1:{port}"], tmp_path) as srv:
            for name, (alg, key) in keys.items():
                assert verified(srv, name, alg, key) and verified(srv, name, alg, key, tcp=True), name
                msgs = list(dns.query.xfr("127.0.0.1", ZONE, port=srv.port, timeout=5, lifetime=10,
                                          keyring=dns.tsigkeyring.from_text({name + ".": (alg, key)}),
                                          keyname=name + ".", keyalgorithm=alg))
                assert msgs and all(m.had_tsig for m in msgs)
            assert not verified(srv, "bind-a", "hmac-sha256", secret("nope"))
            assert "--tsig-key" not in srv.logs()  # no ps warning without --tsig-key
            # NOTIFY: signed with the first key (dnspython verifies it or raises)
            data = secondary.recv(65535)
            first = dns.tsigkeyring.from_text({"bind-a.": keys["bind-a"]})
            notify = dns.message.from_wire(data, keyring=first)
            assert notify.had_tsig and notify.keyname is not None and notify.keyname.to_text() == "bind-a."


def test_key_from_the_environment_and_its_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCSDNS_TSIG_KEY", f"env-key:hmac-sha256:{secret('env')}")
    with run_server(SERVE, tmp_path) as srv:
        assert verified(srv, "env-key", "hmac-sha256", secret("env"))
        r = dns.message.from_wire(send(srv, dns.message.make_query(ZONE, "AXFR").to_wire(), True))
        assert r.rcode() == dns.rcode.REFUSED  # a key is configured: unsigned transfers refused
    # a key given by flag or file replaces the environment's
    with run_server([*SERVE, "--tsig-key", KEY], tmp_path) as srv:
        assert verified(srv, "xfr-key", "hmac-sha256", SECRET)
        assert not verified(srv, "env-key", "hmac-sha256", secret("env"))
        assert "prefer --tsig-key-file" in srv.logs()


@pytest.mark.parametrize("alg", ["hmac-sha1", "hmac-md5"])
def test_weak_algorithms_refused_unless_allowed(tmp_path: Path, alg: str) -> None:
    key = f"old:{alg}:{secret('old')}"
    p = subprocess.run([sys.executable, "-m", "mcsdns", "serve", "--listen", f"127.0.0.1:{free_port()}",
                        *SERVE, "--tsig-key", key], cwd=REPO, capture_output=True, text=True, timeout=20)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "weak" in p.stderr and "--tsig-allow-weak" in p.stderr and secret("old") not in p.stderr
    with run_server([*SERVE, "--tsig-key", key, "--tsig-allow-weak"], tmp_path) as srv:
        wire_alg = "hmac-md5.sig-alg.reg.int" if alg == "hmac-md5" else alg
        assert verified(srv, "old", wire_alg, secret("old"))


S = secret("bad")
BAD_FILES = {
    "bind-no-secret": ('key "a" {\n  algorithm hmac-sha256;\n};\n', ":1: key 'a' has no secret"),
    "bind-unknown": (f'key "a" {{\n  algorithm hmac-sha256;\n  secrets "{S}";\n}};\n',
                     ":3: expected 'algorithm'"),
    "bind-unterminated": (f'key "a" {{\n  algorithm hmac-sha256;\n  secret "{S};\n}};\n', ":3: unterminated"),
    "bind-eof": (f'key "a" {{\n  algorithm hmac-sha256;\n  secret "{S}";\n', ":3: expected '}'"),
    "bind-algorithm": (f'key "a" {{ algorithm hmac-sha999; secret "{S}"; }};\n',
                       ":1: unsupported algorithm 'hmac-sha999'"),
    "knot-field": (f"key:\n  - id: a\n    algorithm: hmac-sha256\n    secret: {S}\n    color: red\n",
                   ":5: expected 'id:', 'algorithm:' or 'secret:'"),
    "knot-section": (f"server:\n  listen: 0.0.0.0\nkey:\n  - id: a\n    secret: {S}\n",
                     ":1: expected 'key:'"),
    "knot-no-alg": (f"key:\n  - id: a\n    secret: {S}\n", ":2: key 'a' has no algorithm"),
    "line-base64": ("# ok\na:hmac-sha256:not*base64\n", ":2: secret is not base64"),
    "line-shape": ("a:hmac-sha256\n", ":1: expected NAME:ALGORITHM:BASE64SECRET"),
    "duplicate": (f"a:hmac-sha256:{S}\nb:hmac-sha256:{S}\nA.:hmac-sha384:{S}\n", ":3: key 'A' defined twice"),
    "weak": (f"# old\na:hmac-sha1:{S}\n", ":2: key 'a': hmac-sha1 is weak"),
    "empty": ("# nothing\n", ": no keys"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_key_file_is_a_one_line_error_naming_file_and_line(tmp_path: Path, case: str) -> None:
    text, want = BAD_FILES[case]
    path = tmp_path / f"{case}.key"
    path.write_text(text)
    p = subprocess.run([sys.executable, "-m", "mcsdns", "serve", "--listen", f"127.0.0.1:{free_port()}",
                        "--manifests", str(EXAMPLE), "--tsig-key-file", str(path)],
                       cwd=REPO, capture_output=True, text=True, timeout=20)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.startswith(f"mcsdns: --tsig-key-file {path}") and want in p.stderr, p.stderr
    assert S not in p.stderr


def test_missing_key_file_and_bad_environment_are_one_line_errors(tmp_path: Path) -> None:
    base = [sys.executable, "-m", "mcsdns", "serve", "--listen", f"127.0.0.1:{free_port()}",
            "--manifests", str(EXAMPLE)]
    absent = tmp_path / "absent"
    for args, env, want in (
            (["--tsig-key-file", str(absent)], {}, f"mcsdns: --tsig-key-file {absent}: No such file"),
            ([], {"MCSDNS_TSIG_KEY": "env-key:hmac-sha256:%%%"},
             "mcsdns: $MCSDNS_TSIG_KEY:1: secret is not base64"),
            (["--tsig-key", "nocolons"], {}, "mcsdns: --tsig-key: expected NAME:ALGORITHM:BASE64SECRET")):
        p = subprocess.run([*base, *args], cwd=REPO, capture_output=True, text=True, timeout=20,
                           env={**os.environ, **env})
        assert p.returncode == 2 and p.stderr.count("\n") == 1 and p.stderr.startswith(want), p.stderr
