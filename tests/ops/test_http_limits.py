"""The HTTP endpoints hold against hostile clients: slow headers are cut at the
request deadline, over-long lines get an answer (no traceback), connections
beyond the cap never stop /ready from answering, and neither does a flood of
connections reopened as fast as they are closed."""

from __future__ import annotations

import resource
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.controller_env import Cluster, eventually, run_controller
from support.helpers import EXAMPLE, Server, run_server

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from robustness.http_flood import probe_during_flood  # noqa: E402

DEADLINE = 5.0  # mcsdns.ops.http.DEADLINE, as a client sees it
CAP = 64  # mcsdns.ops.http.MAX_CONNS


@pytest.fixture
def srv(tmp_path: Path) -> Iterator[Server]:
    with run_server(["--manifests", str(EXAMPLE)], tmp_path) as s:
        yield s


def connect(srv: Server) -> socket.socket:
    return socket.create_connection(("127.0.0.1", srv.http_port), timeout=2)


def answer(sock: socket.socket, timeout: float = 2) -> bytes:
    """Everything the server sends until it closes (b"" when reset)."""
    sock.settimeout(timeout)
    out = b""
    try:
        while chunk := sock.recv(65536):
            out += chunk
    except ConnectionResetError:
        pass
    return out


def trickle(port: int) -> float | None:
    """Send a request line, then one header line a second, never the end; the
    seconds until the server closes (None: still open after DEADLINE + 20)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=2)
    s.sendall(b"GET /ready HTTP/1.1\r\n")
    t0 = time.monotonic()
    while time.monotonic() - t0 < DEADLINE + 20:
        try:
            s.sendall(b"X-Trickle: 1\r\n")
            s.settimeout(1)
            if s.recv(1) == b"":
                return time.monotonic() - t0
        except TimeoutError:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return time.monotonic() - t0
    return None


def test_a_header_trickle_is_closed_at_the_request_deadline(srv: Server) -> None:
    gone = trickle(srv.http_port)
    assert gone is not None and gone >= DEADLINE - 1, gone  # closed, by the deadline
    assert srv.http("/ready")[0] == 200


@pytest.mark.parametrize("request_, status", [
    (b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\n\r\n", b"414"),
    (b"GET /ready HTTP/1.1\r\nX-Big: " + b"b" * 100_000 + b"\r\n\r\n", b"431"),
    (b"GET /ready HTTP/1.1\r\n" + b"X-Many: 1\r\n" * 1000 + b"\r\n", b"431"),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", b"400"),
])
def test_over_long_or_malformed_requests_are_answered_without_a_traceback(
        srv: Server, request_: bytes, status: bytes) -> None:
    for _ in range(3):
        s = connect(srv)
        try:
            s.sendall(request_)
        except (ConnectionResetError, BrokenPipeError):
            pass
        assert answer(s).split(b" ", 2)[1] == status
        s.close()
    assert srv.http("/ready")[0] == 200
    assert "Traceback" not in srv.logs()


def test_connections_beyond_the_cap_are_closed_and_ready_still_answers(srv: Server) -> None:
    held = [connect(srv) for _ in range(CAP + 36)]
    time.sleep(0.3)
    assert srv.http("/ready")[0] == 200
    still_open = 0
    for s in held:
        s.setblocking(False)
        try:
            if s.recv(1) != b"":
                still_open += 1
        except BlockingIOError:
            still_open += 1
        except ConnectionResetError:
            pass
        s.close()
    assert 0 < still_open <= CAP  # /ready answered while those within the cap were still held


def test_a_request_sent_just_after_connecting_is_answered_while_the_table_is_full(srv: Server) -> None:
    """Every place held by a connection with half a request; a client that connects and
    sends its request a few ms later still gets its answer (and the holders keep theirs)."""
    held = [connect(srv) for _ in range(CAP)]
    for s in held:
        s.sendall(b"GET /ready HTTP/1.1\r\n")
    time.sleep(0.2)
    for delay in (0.0, 0.005, 0.01):
        late = connect(srv)
        time.sleep(delay)
        late.sendall(b"GET /ready HTTP/1.1\r\n\r\n")
        got = answer(late)
        assert got.startswith(b"HTTP/1.1 200 "), f"sent {delay * 1000:.0f} ms after connecting: {got!r}"
        late.close()
    for s in held:
        s.sendall(b"\r\n")
        assert answer(s).startswith(b"HTTP/1.1 200 ")
        s.close()


def test_probes_are_answered_while_thousands_of_connections_churn(srv: Server) -> None:
    """Another process keeps 3,000 connections open that send nothing and reopens each
    as soon as it is closed; a kubelet-like probe (1 s to answer) asks /ready every
    200 ms. Before: about half the probes failed, with runs of failures of several
    seconds, and every closed connection logged a traceback."""
    conns = min(3000, resource.getrlimit(resource.RLIMIT_NOFILE)[1] - 256)
    probes, opened = probe_during_flood(srv, conns, seconds=8.0, interval=0.2)
    n = len(probes.results)
    assert opened > conns  # connections were closed and reopened
    assert probes.passed >= 0.99 * n, f"{probes.passed} of {n} probes answered in 1 s"
    assert srv.proc.poll() is None
    assert "Traceback" not in srv.logs()
    assert srv.metric_sum("mcsdns_http_errors_total") >= opened - conns - 64


def test_the_controllers_endpoints_have_the_same_limits(tmp_path: Path) -> None:
    cl = Cluster("a", "a.example", tmp_path)
    try:
        with run_controller(["--cluster", f"a={cl.kubeconfig}", "--resync", "1"], tmp_path) as ctl:
            assert eventually(ctl.ready, what="controller ready")
            long = socket.create_connection(("127.0.0.1", ctl.health), timeout=2)
            long.sendall(b"GET /ready HTTP/1.1\r\n" + b"X-Many: 1\r\n" * 1000 + b"\r\n")
            assert answer(long).split(b" ", 2)[1] == b"431"
            gone = trickle(ctl.health)
            assert gone is not None and gone >= DEADLINE - 1, gone  # closed, by the deadline
            assert ctl.ready()
            assert "Traceback" not in ctl.logs()
    finally:
        cl.close()
