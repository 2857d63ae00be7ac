"""A member credential's expiry (kube.apiclient.expiry): read from a JWT token's claims and a client
certificate's validity, published by the controller per member, alerted on and reported by
`mcsdns diagnose` before the credential stops working."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from fakeapi.credential import jwt, with_token
from support.controller_env import Cluster, eventually, run_controller
from support.helpers import REPO

from mcsdns.kube.apiclient.expiry import LEFT, LEFT_UNKNOWN, MAX, Validity, due, of_certificate, of_token

RULES = REPO / "deploy" / "monitoring" / "rules" / "mcsdns-controller.rules.yaml"
DAY = 86400.0


def test_a_jwt_tokens_claims_are_read_and_any_other_token_says_nothing() -> None:
    assert of_token(jwt(2_000_000_000, 1_999_000_000)) == Validity(2e9, 1.999e9)
    assert of_token(jwt(2_000_000_000.5)) == Validity(2_000_000_000.5, None)
    for token in ("", "opaque-static-token", "a.b.c", "a.b", "x" * 40 + "." + "!!!" + ".sig",
                  jwt("2000000000"), jwt(True), jwt(-5), jwt(None), jwt({"n": 1})):
        assert of_token(token) is None, token
    assert of_token(jwt(2e9, iat="soon")) == Validity(2e9, None)
    assert of_token(jwt(2e9, pad="x" * MAX)) is None  # larger than anything looked at


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
@pytest.mark.parametrize("days", [10, 15000])  # notAfter a UTCTime, then (after 2049) a GeneralizedTime
def test_a_client_certificates_validity_is_read(tmp_path: Path, days: int) -> None:
    cert = tmp_path / "c.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(tmp_path / "k.pem"), "-out", str(cert), "-days", str(days),
                    "-subj", "/CN=member"], check=True, capture_output=True)

    def date(which: str) -> float:
        out = subprocess.run(["openssl", "x509", "-in", str(cert), "-noout", f"-{which}", "-dateopt",
                              "iso_8601"], check=True, capture_output=True, text=True).stdout
        return datetime.strptime(out.split("=", 1)[1].strip(), "%Y-%m-%d %H:%M:%SZ").replace(
            tzinfo=UTC).timestamp()

    pem = cert.read_text()
    assert of_certificate(pem) == Validity(date("enddate"), date("startdate"))
    der = base64.b64decode("".join(pem.splitlines()[1:-1]))

    def pem_of(data: bytes) -> str:
        return f"-----BEGIN CERTIFICATE-----\n{base64.b64encode(data).decode()}\n-----END CERTIFICATE-----\n"

    assert of_certificate(pem_of(der)) == of_certificate(pem)
    for broken in ("", "not a certificate", pem_of(der[:60]), pem_of(der[:3]), pem_of(b"\x30\x85" + der[2:]),
                   "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
                   "-----BEGIN CERTIFICATE-----\nMIQAAAAA\n-----END CERTIFICATE-----\n"):
        assert of_certificate(broken) is None, broken


def test_due_when_a_fifth_of_the_lifetime_is_left_or_three_days_unknown() -> None:
    month = Validity(30 * DAY, 0.0)
    assert not due(month, 23.9 * DAY) and due(month, 24.1 * DAY) and due(month, 31 * DAY)
    day = Validity(DAY, 0.0)
    assert not due(day, 0.7 * DAY) and due(day, 0.9 * DAY)
    unknown = Validity(10 * DAY)
    assert not due(unknown, 6.9 * DAY) and due(unknown, 7.1 * DAY)


def test_the_alert_fires_by_the_rule_diagnose_uses() -> None:
    """MCSDNSControllerMemberCredentialExpiring's constants are kube.apiclient.expiry's."""
    rule = next(r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]
                if r.get("alert") == "MCSDNSControllerMemberCredentialExpiring")
    assert [float(x) for x in re.findall(r"< ([0-9.]+) \*", rule["expr"])] == [LEFT]
    assert [float(x) for x in re.findall(r"< ([0-9]+)\n", rule["expr"])] == [LEFT_UNKNOWN]


def test_the_controller_publishes_each_members_credential_expiry(clusters2: list[Cluster],
                                                                 tmp_path: Path) -> None:
    a, b = clusters2
    ja = with_token(a.kubeconfig, jwt(2_000_000_000, 1_997_408_000), tmp_path / "a.token.kubeconfig")
    with run_controller(["--cluster", f"a={ja}", "--cluster", f"b={b.kubeconfig}"], tmp_path) as ctl:
        eventually(ctl.ready, what="first sync")
        m = ctl.metrics()
    assert m['mcsdns_controller_member_credential_expiry_timestamp_seconds{member="a"}'] == 2e9
    assert m['mcsdns_controller_member_credential_issued_timestamp_seconds{member="a"}'] == 1_997_408_000
    assert not any('member="b"' in k and "credential" in k for k in m)  # no credential that says


def test_diagnose_warns_when_a_member_credential_nears_its_expiry(clusters2: list[Cluster],
                                                                  tmp_path: Path) -> None:
    a, b = clusters2
    now = time.time()
    ja = with_token(a.kubeconfig, jwt(now + 2 * DAY, now - 28 * DAY), tmp_path / "a.token.kubeconfig")
    jb = with_token(b.kubeconfig, jwt(now + 20 * DAY, now - 10 * DAY), tmp_path / "b.token.kubeconfig")
    out = subprocess.run([sys.executable, "-m", "mcsdns", "diagnose", "--cluster", f"a={ja}",
                          "--cluster", f"b={jb}"], capture_output=True, text=True, timeout=60, cwd=REPO)
    lines = [line.split() for line in out.stdout.splitlines() if " credential " in line]
    assert [(w[0], w[1]) for w in lines] == [("WARN", "a"), ("OK", "b")], out.stdout
    assert "in 2.0 days: renew it" in out.stdout and "mcsdns join" in out.stdout
