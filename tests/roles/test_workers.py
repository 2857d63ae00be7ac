"""--workers N: processes share the port, metrics are summed, dead workers come back."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

from support.helpers import EXAMPLE, run_server, wait_for

NAME = "web.shop.svc.clusterset.local."
SAMPLE = 'mcsdns_dns_responses_total{proto="udp",rcode="NOERROR",type="A"}'


def test_workers_share_the_port_and_sum_metrics(tmp_path: Path) -> None:
    with run_server(["--manifests", str(EXAMPLE), "--workers", "2"], tmp_path) as srv:
        assert srv.http("/ready")[0] == 200
        expected = {rd.to_text() for rr in srv.query(NAME).answer for rd in rr}
        assert expected
        for _ in range(199):
            assert {rd.to_text() for rr in srv.query(NAME).answer for rd in rr} == expected
        assert wait_for(lambda: srv.metric(SAMPLE) == 200)
        serials = {srv.query("clusterset.local.", "SOA").answer[0][0].serial for _ in range(20)}
        assert len(serials) == 1  # every worker answers the same SOA
        pids = [int(p) for p in re.findall(r"worker \d started \(pid (\d+)\)", srv.logs())]
        assert len(pids) == 2
        os.kill(pids[0], signal.SIGKILL)
        assert wait_for(lambda: "restarting" in srv.logs())
        assert wait_for(lambda: srv.http("/ready")[0] == 200)
        for _ in range(20):
            assert {rd.to_text() for rr in srv.query(NAME).answer for rd in rr} == expected
