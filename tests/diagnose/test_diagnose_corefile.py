"""`mcsdns diagnose` reads the cluster's Corefile as CoreDNS does (the wirings CoreDNS
itself runs are in test_coredns_wirings.py, with MCSDNS_COREDNS): pods ask on port 53 when
no kube-dns Service says otherwise, a forward without a port goes to 53, AKS's
coredns-custom keys are the files `import custom/*.server` reads, and a Corefile CoreDNS
would refuse, or an import diagnose cannot read, is said so."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.controller_env import Cluster
from support.diagnose_env import clusterset, configmap, diagnose, fails, healthy, statuses

from mcsdns.diagnose.collect import Obj, Snapshot
from mcsdns.diagnose.dnsconfig import verdict

__all__ = ["healthy"]  # the fixture

DEFAULT = ".:53 {\n    forward . /etc/resolv.conf\n}\n"
AKS = ".:53 {\n    forward . /etc/resolv.conf\n    import custom/*.override\n}\nimport custom/*.server\n"


def _ip(c: Cluster) -> str:
    svc = c.kube.get("/api/v1/namespaces/mcsdns-system/services/mcsdns")
    assert svc is not None
    return str(svc["spec"]["clusterIP"])


def _custom(c: Cluster, data: dict[str, str]) -> None:
    c.api.put({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "coredns-custom", "namespace": "kube-system"}, "data": data})


@pytest.mark.parametrize("corefile,status,want", [
    (DEFAULT + "clusterset.local:5353 {\n    forward . $IP\n}\n", "FAIL",
     "pods ask on port 53, where no block serves clusterset.local (clusterset.local:5353 listens on "
     "another)"),
    (DEFAULT + "clusterset.local {\n    forward . $IP:5353\n}\n", "FAIL",
     "forwards to $IP:5353, a port Service mcsdns-system/mcsdns does not have for UDP"),
    (DEFAULT + "clusterset.local {\n    forward . $IP:53\n}\n", "OK", "($IP:53, 1 ready endpoint)"),
    (DEFAULT + "clusterset.local {\n    forward . $IP 8.8.8.8 {\n        policy round_robin\n    }\n}\n",
     "FAIL", "spreads queries over 2 upstreams (policy round_robin)"),
    (DEFAULT + "clusterset.local {\n    forward . 10.96.0.10\n}\n", "FAIL", "the cluster DNS itself, a loop"),
    (DEFAULT + "clusterset.local {\n    forward . tls://$IP\n}\n", "FAIL",
     "over tls, which mcsdns does not serve"),
    (".:53 {\n    kubernetes cluster.local clusterset.local\n    forward . $IP\n}\n", "FAIL",
     "answered by the kubernetes plugin of block .:53"),
    (".:53 {\n    forward clusterset.local $IP\n    forward . /etc/resolv.conf\n}\n", "OK",
     "clusterset.local forwards to Service mcsdns-system/mcsdns"),
    (DEFAULT + "clusterset.local {\n    forward . $IP {\n        except svc.clusterset.local\n    }\n}\n",
     "FAIL", "svc.clusterset.local has no forward line for it"),
    (".:53 {\n    multicluster clusterset.local\n    forward . /etc/resolv.conf\n}\n", "OK",
     "answered by CoreDNS's multicluster plugin"),
    ("(a) {\n    import b\n}\n(b) {\n    import a\n}\n.:53 {\n    import a\n}\n", "FAIL",
     "CoreDNS cannot load this Corefile: import cycle"),
    (DEFAULT + "import /etc/other/zones.conf\n", "WARN", "not read: import /etc/other/zones.conf"),
])
def test_the_corefile_as_coredns_reads_it(healthy: tuple[Cluster, Cluster], corefile: str, status: str,
                                          want: str) -> None:
    a, b = healthy
    b.kube.service("kube-system", "kube-dns", ports=(("dns", 53, "UDP"),))  # 10.96.0.x, not 10.96.0.10
    corefile = corefile.replace("10.96.0.10", str(b.kube.get(
        "/api/v1/namespaces/kube-system/services/kube-dns")["spec"]["clusterIP"]))  # type: ignore[index]
    configmap(b, "coredns", corefile.replace("$IP", _ip(b)))
    rc, report = diagnose(*clusterset(a, b))
    got, message = statuses(report, "coredns")["b"]
    assert (got, rc) == (status, 1 if status == "FAIL" else 0), message
    assert want.replace("$IP", _ip(b)) in message, message


def test_aks_coredns_custom_holds_the_zone_block(healthy: tuple[Cluster, Cluster]) -> None:
    """docs/deploy.md's AKS setup: the managed Corefile imports custom/*.server, the files
    of ConfigMap coredns-custom; its .override keys go into the default block."""
    a, b = healthy
    configmap(b, "coredns", AKS)
    rc, report = diagnose(*clusterset(a, b))
    assert rc == 1 and "where no block serves clusterset.local" in statuses(report, "coredns")["b"][1]
    _custom(b, {"clusterset.server": f"clusterset.local:53 {{\n    forward . {_ip(b)}\n}}\n"})
    rc, report = diagnose(*clusterset(a, b))
    assert rc == 0 and statuses(report, "coredns")["b"][0] == "OK", statuses(report, "coredns")
    # an .override key goes into .:53 after its `forward .`, which comes first (Corefile order)
    _custom(b, {"clusterset.override": f"forward clusterset.local {_ip(b)}\n"})
    rc, report = diagnose(*clusterset(a, b))
    assert rc == 1 and fails(report) == {("coredns", "b", "")}
    assert "they get block .:53, which forwards to /etc/resolv.conf" in statuses(report, "coredns")["b"][1]
    b.api.deny("configmaps", ("get",))
    rc, report = diagnose(*clusterset(a, b))
    assert statuses(report, "coredns")["b"][0] == "WARN"


WORDS = ["{", "}", ".:53", "clusterset.local", "clusterset.local:5353", ",", "a,", "forward", ".",
         "1.2.3.4:53", "import", "(s)", "s", "*.server", "custom/*", "/x", "policy", "sequential", "except",
         "multicluster", "kubernetes", "fallthrough", "\n", "#", '"q q"', "tls://[::1]:853", "dns://", ":",
         "[", "/etc/resolv.conf"]


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.sampled_from(WORDS), max_size=40), st.lists(st.sampled_from(WORDS), max_size=20))
def test_any_corefile_gets_a_verdict_never_a_traceback(words: list[str], custom: list[str]) -> None:
    files: dict[str, Obj | None] = {"coredns": {"data": {"Corefile": "", "a.server": " ".join(custom)}},
             "coredns-custom": {"data": {"b.server": " ".join(custom), "c": "import *"}}}
    s = Snapshot("x", configmaps=files)
    status, message = verdict(s, "coredns", " ".join(words), "clusterset.local", False)
    assert status in ("OK", "WARN", "FAIL") and message
