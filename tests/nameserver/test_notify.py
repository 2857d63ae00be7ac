"""NOTIFY (RFC 1996) to a listening socket standing in for a secondary: content, retries,
batching, and one NOTIFY per serial with --workers, sent once every worker serves it."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dns.flags
import dns.message
import dns.opcode
import dns.rdatatype
import pytest
from support.helpers import Server, clusterset_ip, copy_example, free_port, run_server, wait_for

ZONE = "clusterset.local."


class FakeSecondary:
    """Receives NOTIFYs on a UDP port; answers them while `answering` is set."""

    def __init__(self, port: int, check: Server | None = None) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", port))
        self.sock.settimeout(0.2)
        self.answering = threading.Event()
        self.got: list[tuple[float, int, dns.message.Message]] = []  # (time, serial, message)
        # SOA serials the primary answered right then (None: `check` not set yet)
        self.served_at_notify: list[set[int] | None] = []
        self.check = check
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                data, addr = self.sock.recvfrom(65535)
            except TimeoutError:
                continue
            m = dns.message.from_wire(data)
            serial = int(m.answer[0][0].serial) if m.answer else -1
            at = time.monotonic()
            seen: set[int] | None = None
            if self.check is not None:  # like a secondary: ask the primary's SOA at once
                seen = set()
                for _ in range(10):
                    try:
                        seen.add(int(self.check.query(ZONE, "SOA").answer[0][0].serial))
                    except Exception:  # a lost UDP answer on a loaded machine: ask again
                        continue
            self.served_at_notify.append(seen)
            self.got.append((at, serial, m))
            if self.answering.is_set():
                r = dns.message.make_response(m)
                self.sock.sendto(r.to_wire(), addr)

    def serials(self) -> list[int]:
        return [s for _, s, _ in self.got]

    def close(self) -> None:
        self.stop.set()
        self.thread.join(2)
        self.sock.close()


@contextmanager
def fake_secondary(port: int) -> Iterator[FakeSecondary]:
    sec = FakeSecondary(port)
    try:
        yield sec
    finally:
        sec.close()


def serial(srv: Server) -> int:
    return int(srv.query(ZONE, "SOA").answer[0][0].serial)


@pytest.fixture
def mdir(tmp_path: Path) -> Path:
    return copy_example(tmp_path / "manifests")


def test_notify_content_retries_and_batching(mdir: Path, tmp_path: Path) -> None:
    port = free_port()
    with fake_secondary(port) as sec, run_server(["--manifests", str(mdir), "--notify",
                                                  f"127.0.0.1:{port}"], tmp_path) as srv:
        # the first serial is notified, and retried while unanswered (1 s, then 2 s)
        assert wait_for(lambda: len(sec.got) >= 2, 6)
        s0 = serial(srv)
        assert set(sec.serials()) == {s0}
        t = [g[0] for g in sec.got]
        assert t[1] - t[0] >= 0.8
        m = sec.got[0][2]
        assert m.opcode() == dns.opcode.NOTIFY and m.flags & dns.flags.AA and not m.flags & dns.flags.QR
        assert m.question[0].name.to_text() == ZONE and m.question[0].rdtype == dns.rdatatype.SOA
        sec.answering.set()
        assert wait_for(lambda: len(sec.got) >= 3, 6)  # the next retry is answered ...
        n = len(sec.got)
        time.sleep(2.5)
        assert len(sec.got) == n  # ... and ends the retries
        # a burst of 10 changes within ~0.3 s: batched, the last serial always notified
        start = len(sec.got)
        t0 = time.monotonic()
        for i in range(10):
            (mdir / "live.yaml").write_text(clusterset_ip("api", f"10.77.0.{i + 1}"))
            time.sleep(0.03)
        assert wait_for(lambda: srv.query("api.live.svc.clusterset.local.").answer
                        and srv.query("api.live.svc.clusterset.local.").answer[0][0].to_text()
                        == "10.77.0.10", 5)
        final = serial(srv)
        assert wait_for(lambda: final in sec.serials(), 3)
        burst = sec.got[start:]
        span = burst[-1][0] - t0
        assert len(burst) <= span / 0.1 + 2, [(round(g[0] - t0, 3), g[1]) for g in burst]
        assert len(burst) < 10, burst  # batched: fewer NOTIFYs than changes (rounds 100 ms apart)
        print(f"\n10 changes in {len(burst)} NOTIFYs over {burst[-1][0] - burst[0][0]:.2f} s")
        assert sorted(sec.serials()[start:]) == sec.serials()[start:]  # increasing
        target = f'target="127.0.0.1:{port}"'
        assert srv.metric_sum("mcsdns_notify_total", target, 'outcome="answered"') >= 1 + len(burst)
        assert srv.metric_sum("mcsdns_notify_total", target, 'outcome="sent"') == len(sec.got)


def test_workers_send_one_notify_per_serial_once_all_serve_it(mdir: Path, tmp_path: Path) -> None:
    port = free_port()
    sec: FakeSecondary | None = None
    try:
        sec = FakeSecondary(port)
        sec.answering.set()
        with run_server(["--manifests", str(mdir), "--workers", "2", "--notify", f"127.0.0.1:{port}"],
                        tmp_path, timeout=30) as srv:
            sec.check = srv
            assert wait_for(lambda: len(sec.got) >= 1, 10)
            for i in range(3):
                (mdir / "live.yaml").write_text(clusterset_ip("api", f"10.77.0.{i + 1}"))
                before = len(sec.got)
                assert wait_for(lambda b=before: len(sec.got) > b, 10)
                time.sleep(0.4)
            time.sleep(1.0)
            serials = sec.serials()
            assert len(serials) == len(set(serials)), serials  # one NOTIFY per serial
            assert serials == sorted(serials)
            # at each NOTIFY, every SOA answer (from either worker) already had that serial;
            # the first NOTIFY may come before `check` is set, the three changes' come after it
            checked = [(s, seen) for s, seen in zip(serials, sec.served_at_notify, strict=True)
                       if seen is not None]
            assert len(checked) >= 3, (serials, sec.served_at_notify)
            for s, seen in checked:
                assert seen and min(seen) >= s, (s, seen)
    finally:
        if sec is not None:
            sec.close()
