"""TCP limits and timeouts hold against abusive clients while UDP keeps answering;
SIGTERM drains, SIGHUP re-reads the manifests."""

from __future__ import annotations

import os
import signal
import socket
import struct
import time
from pathlib import Path

import dns.message
from helpers import EXAMPLE, Server, copy_example, run_server, wait_for

NAME = "web.shop.svc.clusterset.local."
LIMITS = ["--tcp-max-conns", "20", "--tcp-idle-timeout", "1", "--tcp-read-timeout", "1"]


def udp_ok(srv: Server) -> bool:
    return bool(srv.query(NAME, "A", timeout=1).answer)


def closed(sock: socket.socket, within: float) -> bool:
    sock.settimeout(within)
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def test_idle_and_slow_clients_are_cut_off(tmp_path: Path) -> None:
    with run_server(["--manifests", str(EXAMPLE), *LIMITS], tmp_path) as srv:
        idle = socket.create_connection(srv.addr)
        slow = socket.create_connection(srv.addr)
        msg = dns.message.make_query(NAME, "A").to_wire()
        frame = struct.pack("!H", len(msg)) + msg
        t0 = time.monotonic()
        # one byte every 0.3 s: the query never completes within the 1 s read timeout
        for b in frame[:5]:
            slow.send(bytes((b,)))
            time.sleep(0.3)
            assert udp_ok(srv)
        assert closed(slow, 1.5)
        assert closed(idle, 1.5)
        assert time.monotonic() - t0 < 4
        assert srv.metric("mcsdns_tcp_connections_timed_out_total") >= 2


def test_connections_over_the_limit_are_refused(tmp_path: Path) -> None:
    with run_server(["--manifests", str(EXAMPLE), *LIMITS], tmp_path) as srv:
        conns = [socket.create_connection(srv.addr) for _ in range(20)]
        time.sleep(0.2)
        extra = socket.create_connection(srv.addr)
        assert closed(extra, 1)
        assert udp_ok(srv)
        # a connection within the limit still gets answers
        msg = dns.message.make_query(NAME, "A").to_wire()
        conns[0].sendall(struct.pack("!H", len(msg)) + msg)
        conns[0].settimeout(2)
        buf = b""
        while len(buf) < 2 or len(buf) < 2 + struct.unpack("!H", buf[:2])[0]:
            buf += conns[0].recv(4096)
        assert dns.message.from_wire(buf[2:]).answer
        assert srv.metric("mcsdns_tcp_connections_rejected_total") >= 1
        for c in conns:
            c.close()


def test_sigterm_drains_and_exits(tmp_path: Path) -> None:
    with run_server(["--manifests", str(EXAMPLE)], tmp_path) as srv:
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.proc.wait(5) == 0
        assert "shutting down" in srv.logs()


def test_sighup_rereads_manifests(tmp_path: Path) -> None:
    mdir = copy_example(tmp_path / "m")
    f = mdir / "hup.yaml"
    doc = ("apiVersion: multicluster.x-k8s.io/v1beta1\nkind: ServiceImport\n"
           "metadata: {name: hup, namespace: shop}\nspec: {type: ClusterSetIP, ips: [ADDR]}\n")
    f.write_text(doc.replace("ADDR", "10.70.0.1"))
    name = "hup.shop.svc.clusterset.local."
    with run_server(["--manifests", str(mdir)], tmp_path) as srv:
        assert [rd.to_text() for rr in srv.query(name).answer for rd in rr] == ["10.70.0.1"]
        st = f.stat()
        # same size, same inode, mtime restored: invisible to polling
        f.write_text(doc.replace("ADDR", "10.70.0.2"))
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
        time.sleep(0.6)
        assert [rd.to_text() for rr in srv.query(name).answer for rd in rr] == ["10.70.0.1"]
        srv.proc.send_signal(signal.SIGHUP)
        assert wait_for(lambda: [rd.to_text() for rr in srv.query(name).answer for rd in rr]
                        == ["10.70.0.2"])
