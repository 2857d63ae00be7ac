"""Runs inside a network namespace for the kube-proxy end-to-end test (`ip netns exec NS python
netns_agent.py ...`):

    serve UNIX_DIR PORT[,PORT...] IP=NAME[,IP=NAME...]
        relay TCP 127.0.0.1:PORT in the namespace to the Unix socket UNIX_DIR/PORT (Unix sockets
        are not namespaced: the test's side relays them to the API servers on the host), and
        answer TCP on IP:8080 with NAME (each endpoint says who it is); until killed.
    probe IP PORT N
        open N connections to IP:PORT, one after the other; print {NAME: count} as JSON
        ("!" and the error's type for a connection that failed).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
from collections import Counter

ENDPOINT_PORT = 8080


def pipe(a: socket.socket, b: socket.socket) -> None:
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def relay(port: int, path: str) -> None:
    ls = socket.create_server(("127.0.0.1", port))
    while True:
        c, _ = ls.accept()
        u = socket.socket(socket.AF_UNIX)
        u.connect(path)
        threading.Thread(target=pipe, args=(c, u), daemon=True).start()
        threading.Thread(target=pipe, args=(u, c), daemon=True).start()


def answer(ip: str, name: str) -> None:
    ls = socket.create_server((ip, ENDPOINT_PORT))
    while True:
        c, _ = ls.accept()
        with c:
            c.sendall(name.encode())


def probe(ip: str, port: int, n: int) -> Counter[str]:
    out: Counter[str] = Counter()
    for _ in range(n):
        try:
            with socket.create_connection((ip, port), timeout=2) as c:
                out[c.recv(100).decode()] += 1
        except OSError as e:
            out[f"!{type(e).__name__}"] += 1
    return out


def main(argv: list[str]) -> int:
    if argv[0] == "probe":
        print(json.dumps(probe(argv[1], int(argv[2]), int(argv[3]))))
        return 0
    unix_dir, ports, eps = argv[1], argv[2].split(","), argv[3].split(",")
    threads = [threading.Thread(target=relay, args=(int(p), os.path.join(unix_dir, p)), daemon=True)
               for p in ports if p]
    threads += [threading.Thread(target=answer, args=tuple(e.split("=", 1)), daemon=True) for e in eps]
    for t in threads:
        t.start()
    print("ready", flush=True)
    threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
