"""Run one spec vector's query with the real `dig` and parse its output into a Response."""

from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import dataclass

from speccheck import Response
from speclib import Query

_HEADER = re.compile(r";; ->>HEADER<<- opcode: (\S+), status: (\S+), id: (\d+)")
_FLAGS = re.compile(r";; flags:([^;]*);")
_EDNS = re.compile(r"; EDNS: version: (\d+), flags:([^;]*); udp: (\d+)")
_SECTIONS = {
    ";; QUESTION SECTION:": "question",
    ";; ANSWER SECTION:": "answer",
    ";; AUTHORITY SECTION:": "authority",
    ";; ADDITIONAL SECTION:": "additional",
}


@dataclass(frozen=True)
class Dig:
    """How to reach the server under test."""

    host: str
    port: int
    binary: str = "dig"
    timeout: float = 2.0

    def command(self, q: Query) -> list[str]:
        """The dig command line for a query."""
        cmd = [self.binary, f"@{self.host}", "-p", str(self.port), f"+time={max(1, round(self.timeout))}",
               "+tries=1", "+retry=0", "+noall", "+comments", "+question", "+answer", "+authority",
               "+additional", "+nocookie", "+noednsneg", "+ignore"]
        cmd.append("+rec" if q.rd else "+norec")
        if q.transport == "tcp":
            cmd.append("+tcp")
        if q.edns is None:
            cmd.append("+noedns")
        else:
            cmd += [f"+edns={q.edns_version}", f"+bufsize={q.edns_payload}",
                    "+dnssec" if q.edns_do else "+nodnssec"]
        if q.opcode != "QUERY":
            cmd.append(f"+opcode={q.opcode.lower()}")
        if q.header_only:
            return [*cmd, "+header-only", "-q", "."]
        rtype = f"IXFR={q.serial}" if q.type == "IXFR" and q.serial is not None else q.type
        return [*cmd, "-q", q.name, "-t", rtype]

    def query(self, q: Query) -> tuple[Response | None, str]:
        """The parsed response (None when dig got none) and dig's raw output."""
        cmd = self.command(q)
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout * 3 + 5)
        except subprocess.TimeoutExpired:
            return None, f"{shlex.join(cmd)}: dig did not finish"
        out = p.stdout + p.stderr
        return parse(out), out


def parse(out: str) -> Response | None:
    """A Response from dig's `+noall +comments +question +answer +authority +additional`
    output; None if it holds no response header (timeout, connection error)."""
    resp: Response | None = None
    section = ""
    for line in out.splitlines():
        m = _HEADER.match(line)
        if m:
            resp = Response(rcode=m.group(2).rstrip(","), flags=set(), opt=None, question=None)
            section = ""
            continue
        if resp is None:
            continue
        m = _FLAGS.match(line)
        if m:
            resp.flags = set(m.group(1).split())
            continue
        m = _EDNS.match(line)
        if m:
            resp.opt = {"version": int(m.group(1)), "udp": int(m.group(3)),
                        "do": "do" in m.group(2).split()}
            continue
        if line in _SECTIONS:
            section = _SECTIONS[line]
            continue
        if not line.strip():
            section = ""
            continue
        if section == "question" and line.startswith(";"):
            resp.question = line[1:].split()[0]
        elif section in ("answer", "authority", "additional") and not line.startswith(";"):
            getattr(resp, section).append(" ".join(line.split()))
    return resp
