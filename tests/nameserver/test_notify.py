"""NOTIFY (RFC 1996) to a listening socket standing in for a secondary: content, retries,
batching, and one NOTIFY per serial with --workers, sent once every worker serves it."""

from __future__ import annotations

import asyncio
import socket
import struct
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
from support.helpers import Server, clusterset_ip, copy_example, run_server, wait_for
from support.ports import free_port

from mcsdns.dns.names import encode_name
from mcsdns.nameserver import notify
from mcsdns.nameserver.notify import Notifier

ZONE = "clusterset.local."
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux's; Python does not name it


class FakeSecondary:
    """Receives NOTIFYs on a UDP port; answers each one from the `answer_from`-th on (counting
    from 0), so that the ones before it go unanswered whatever the timing."""

    def __init__(self, port: int, check: Server | None = None, answer_from: int = 0) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.settimeout(0.2)
        self.answer_from = answer_from
        self.got: list[tuple[float, int, dns.message.Message]] = []  # (time, serial, message)
        self.arrived: list[float] = []  # the kernel's arrival time of each (unix time)
        # SOA serials the primary answered right then (None: `check` not set yet)
        self.served_at_notify: list[set[int] | None] = []
        self.check = check
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                data, anc, _, addr = self.sock.recvmsg(65535, socket.CMSG_SPACE(16))
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
            self.arrived.extend(sec + ns / 1e9 for level, kind, stamp in anc
                                if (level, kind) == (socket.SOL_SOCKET, SO_TIMESTAMPNS)
                                for sec, ns in [struct.unpack("qq", stamp[:16])])
            self.got.append((at, serial, m))
            if len(self.got) > self.answer_from:
                r = dns.message.make_response(m)
                self.sock.sendto(r.to_wire(), addr)

    def serials(self) -> list[int]:
        return [s for _, s, _ in self.got]

    def close(self) -> None:
        self.stop.set()
        self.thread.join(2)
        self.sock.close()


@contextmanager
def fake_secondary(port: int, answer_from: int = 0) -> Iterator[FakeSecondary]:
    sec = FakeSecondary(port, answer_from=answer_from)
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
    with fake_secondary(port, answer_from=2) as sec, run_server(
            ["--manifests", str(mdir), "--notify", f"127.0.0.1:{port}"], tmp_path) as srv:
        # the first serial is notified, and retried while unanswered (1 s, then 2 s): the
        # secondary answers the third NOTIFY, which ends the retries
        target = f'target="127.0.0.1:{port}"'
        assert wait_for(lambda: srv.metric_sum("mcsdns_notify_total", target, 'outcome="answered"') == 1)
        s0 = serial(srv)
        assert set(sec.serials()) == {s0} and len(sec.got) >= 3, sec.serials()
        assert len({g[2].id for g in sec.got}) == len(sec.got)  # each try a new ID
        # when the kernel took them in: load can delay a send, never make the server wait less
        gaps = [b - a for a, b in zip(sec.arrived, sec.arrived[1:], strict=False)]
        assert len(gaps) >= 2 and gaps[0] >= 0.95 and gaps[1] >= 1.9, gaps
        m = sec.got[0][2]
        assert m.opcode() == dns.opcode.NOTIFY and m.flags & dns.flags.AA and not m.flags & dns.flags.QR
        assert m.question[0].name.to_text() == ZONE and m.question[0].rdtype == dns.rdatatype.SOA
        # a burst of 10 changes: the last serial always notified, in rounds at least BATCH apart
        start = len(sec.got)
        t0 = time.monotonic()
        for i in range(10):
            (mdir / "live.yaml").write_text(clusterset_ip("api", f"10.77.0.{i + 1}"))
            time.sleep(0.03)
        assert wait_for(lambda: srv.query("api.live.svc.clusterset.local.").answer
                        and srv.query("api.live.svc.clusterset.local.").answer[0][0].to_text()
                        == "10.77.0.10")
        final = serial(srv)
        assert wait_for(lambda: final in sec.serials())
        burst = sec.got[start:]
        # the server's clock is this one (CLOCK_MONOTONIC): round k starts >= t0 + (k-1) BATCH and
        # arrives later still, so load only lengthens `span` (batching itself:
        # test_changes_within_one_round_make_one_notify)
        span = burst[-1][0] - t0
        assert len(burst) <= span / notify.BATCH + 1.5, [(round(g[0] - t0, 3), g[1]) for g in burst]
        print(f"\n10 changes in {len(burst)} NOTIFYs over {burst[-1][0] - burst[0][0]:.2f} s")
        assert sorted(sec.serials()[start:]) == sec.serials()[start:]  # increasing
        # the last round's answer counted (an earlier round's may not be: a newer serial replaces
        # its pending wait, as on a slow reply); every NOTIFY sent arrived
        def answered() -> float:
            return srv.metric_sum("mcsdns_notify_total", target, 'outcome="answered"')
        assert wait_for(lambda: answered() >= 2)
        assert answered() <= 1 + len(sec.got[start:])
        assert wait_for(lambda: srv.metric_sum("mcsdns_notify_total", target, 'outcome="sent"')
                        == len(sec.got))
        assert srv.metric_sum("mcsdns_notify_total", target, 'outcome="unanswered"') == 0


class FrozenClock(asyncio.SelectorEventLoop):
    """An event loop whose clock moves only when `advance` says: its timers fire in that
    order, however slowly the machine runs."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 1000.0

    def time(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_changes_within_one_round_make_one_notify() -> None:
    """Serials 2..10 while the round after serial 1's is pending (BATCH not yet passed on a
    clock that moves only when told): one NOTIFY, for serial 10, once BATCH has passed."""
    port = free_port()

    async def run(sec: FakeSecondary) -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, FrozenClock)

        async def arrived(n: int) -> bool:  # waits in a thread: the loop's clock stands still
            return await loop.run_in_executor(None, wait_for, lambda: len(sec.got) >= n)

        n = Notifier(encode_name(ZONE), 30, [("127.0.0.1", port)])
        n.start()
        n.update(1)
        assert await arrived(1)
        for s in range(2, 11):
            n.update(s)
            await loop.run_in_executor(None, time.sleep, 0.05)  # time for a NOTIFY, were one due
        held = sec.serials()
        loop.advance(notify.BATCH)
        assert await arrived(2)
        await loop.run_in_executor(None, time.sleep, 0.2)
        assert (held, sec.serials()) == ([1], [1, 10])
        assert n.counts[(f"127.0.0.1:{port}", "sent")] == 2
        await n.stop()

    with fake_secondary(port) as sec, asyncio.Runner(loop_factory=FrozenClock) as runner:
        runner.run(run(sec))


def test_workers_send_one_notify_per_serial_once_all_serve_it(mdir: Path, tmp_path: Path) -> None:
    port = free_port()
    sec: FakeSecondary | None = None
    try:
        sec = FakeSecondary(port)
        with run_server(["--manifests", str(mdir), "--workers", "2", "--notify", f"127.0.0.1:{port}"],
                        tmp_path, timeout=30) as srv:
            sec.check = srv
            assert wait_for(lambda: len(sec.got) >= 1)
            for i in range(3):
                (mdir / "live.yaml").write_text(clusterset_ip("api", f"10.77.0.{i + 1}"))
                before = len(sec.got)
                assert wait_for(lambda b=before: len(sec.got) > b)
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
