"""The ValidatingAdmissionPolicy that narrows the controller's writes (mcsdns.members.admission):
deploy/controller's YAML is the Python definition, the policy's name pattern is the derived
Services' names, and join installs it (unless told not to) where the API serves it and says
so where it does not; leave removes it. What it allows and refuses is proven against a real
kube-apiserver in test_real_admission.py."""

from __future__ import annotations

import re
import subprocess
import sys

import yaml
from fakeapi.resources import Resource
from support.controller_env import Cluster
from support.helpers import REPO

from mcsdns.controller.kinds.derivedservice import derived_name
from mcsdns.members.admission import BINDINGS, DERIVED, MEMBER, POLICIES, objects
from mcsdns.members.layout import user

DEPLOY = REPO / "deploy" / "controller"


def mcsdns(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mcsdns", *args], capture_output=True, text=True,
                          timeout=60, cwd=REPO)


def test_deploy_ships_the_policy_for_the_controllers_own_service_account() -> None:
    rbac = [o for o in yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text()) if o]
    sa = next(o for o in rbac if o["kind"] == "ServiceAccount")["metadata"]
    account = f"system:serviceaccount:{sa['namespace']}:{sa['name']}"
    shipped = [o for o in yaml.safe_load_all((DEPLOY / "admission.yaml").read_text()) if o]
    assert shipped == objects("mcsdns-controller", [account])
    assert "admission.yaml" in yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["resources"]


def test_the_policys_name_pattern_is_the_derived_services_names() -> None:
    for i in range(2000):
        assert re.fullmatch(DERIVED.strip("^$"), derived_name((f"ns-{i}", f"svc-{i * 7}")))
    assert not re.fullmatch(DERIVED.strip("^$"), "kube-dns")


def _serve_admission(c: Cluster) -> None:
    for r in (POLICIES, BINDINGS):
        c.api.register(Resource(r.plural, r.kind, r.group, ("v1",), namespaced=False, status=False,
                                generation=""))


def test_join_installs_the_policy_for_its_service_account_and_leave_removes_it(
        clusters2: list[Cluster]) -> None:
    a, b = clusters2
    _serve_admission(b)
    out = mcsdns("join", "west", "--kubeconfig", str(b.kubeconfig), "--namespace", "mcs-x", "--output", "-")
    assert out.returncode == 0, out.stderr
    assert f"validatingadmissionpolicy {MEMBER}: created" in out.stderr, out.stderr
    policy, binding = objects(MEMBER, [user("mcs-x")])
    got = b.api.get("ValidatingAdmissionPolicy", None, MEMBER)
    assert got is not None and got["spec"] == policy["spec"]
    assert "'system:serviceaccount:mcs-x:mcsdns-member'" in got["spec"]["matchConditions"][0]["expression"]
    got = b.api.get("ValidatingAdmissionPolicyBinding", None, MEMBER)
    assert got is not None and got["spec"] == binding["spec"]
    out = mcsdns("leave", "west", "--kubeconfig", str(b.kubeconfig), "--namespace", "mcs-x")
    assert out.returncode == 0, out.stderr
    assert f"validatingadmissionpolicy {MEMBER}: deleted" in out.stderr, out.stderr
    assert b.api.get("ValidatingAdmissionPolicy", None, MEMBER) is None
    assert b.api.get("ValidatingAdmissionPolicyBinding", None, MEMBER) is None


def test_join_says_when_the_api_serves_no_policies_and_can_be_told_not_to(clusters2: list[Cluster]) -> None:
    a, b = clusters2
    out = mcsdns("join", "west", "--kubeconfig", str(b.kubeconfig), "--output", "-")
    assert out.returncode == 0, out.stderr
    assert f"validatingadmissionpolicy {MEMBER}: NOT installed" in out.stderr, out.stderr
    _serve_admission(a)
    out = mcsdns("join", "east", "--kubeconfig", str(a.kubeconfig), "--output", "-", "--no-admission-policy")
    assert out.returncode == 0, out.stderr
    assert "validatingadmissionpolicy" not in out.stderr and a.api.get(
        "ValidatingAdmissionPolicy", None, MEMBER) is None


def test_the_default_token_lasts_thirty_days() -> None:
    from mcsdns.cli import build_parser

    args = build_parser().parse_args(["join", "west", "--output", "-"])
    assert args.token_duration == 30 * 86400 and args.admission_policy is True
