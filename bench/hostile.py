"""What a broken or hostile API endpoint costs `mcsdns serve` (tests/fakeapi/hostile.py):

- junk: every watch answers one junk line and ends; watch requests and WARNING lines in
  `--seconds` (25 by default);
- bad item: one ServiceImport list item that does not decode (3,000-deep nesting, a raw NUL,
  invalid UTF-8, an item cut short) beside a good one; the good one's DNS answer;
- newline-free: CPU seconds of the reflector thread reading a 64 MiB watch stream with no
  newline;
- huge integer: a list item with a 5,000-digit integer in a field no parser reads, decoded with
  and without the C decoder (`Fields.decoder`).

    .venv/bin/python bench/hostile.py [--seconds 25] [--only junk,bad,stream,int]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from inspect import signature
from pathlib import Path
from typing import Any

import dns.rcode

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from fakeapi.hostile import HostileAPI  # noqa: E402
from support.helpers import run_server  # noqa: E402
from support.kube_objects import service_import  # noqa: E402

from mcsdns.data.objects import ServiceImport  # noqa: E402
from mcsdns.kube.apiclient.client import Client  # noqa: E402
from mcsdns.kube.apiclient.listdecode import decode_list  # noqa: E402
from mcsdns.kube.apiclient.reflector import Reflector  # noqa: E402

Z = "clusterset.local"
BAD_ITEMS = {
    "deep": b'{"metadata":{"name":"deep","namespace":"shop"},"x":' + b"[" * 3000 + b"]" * 3000 + b"}",
    "nul": b'{"metadata":{"name":"n\x00ul","namespace":"shop"}}',
    "utf8": b'{"metadata":{"name":"bad\xff\xfe","namespace":"shop"}}',
    "cut": b'{"metadata":{"name":"cut","namespace":"shop"},"spec":{"type":"ClusterSetIP"',
}


def junk(seconds: float, tmp: Path) -> None:
    with HostileAPI() as api:
        api.put(service_import("web", "shop", ["10.1.0.1"]))
        api.watch_body = [b"junk\n"]
        kc = api.write_kubeconfig(tmp / "kc")
        with run_server(["--kubeconfig", str(kc)], tmp, wait_ready=False) as srv:
            time.sleep(2.0)
            mark, warned = api.watch_requests(), srv.logs().count("WARNING")
            time.sleep(seconds)
            print(f"junk watch: {api.watch_requests() - mark} watch requests and "
                  f"{srv.logs().count('WARNING') - warned} WARNING lines in {seconds:g} s")


def bad_item(tmp: Path) -> None:
    for name, text in BAD_ITEMS.items():
        with HostileAPI() as api:
            api.put(service_import("web", "shop", ["10.1.0.1"]))
            api.bad_items["serviceimports"] = [text]
            kc = api.write_kubeconfig(tmp / f"kc-{name}")
            with run_server(["--kubeconfig", str(kc)], tmp, wait_ready=False) as srv:
                time.sleep(3.0)
                m = srv.query(f"web.shop.svc.{Z}")
                ans = [str(rd) for rr in m.answer for rd in rr]
                tb = srv.logs().count("Traceback")
                print(f"bad item {name}: web.shop.svc.{Z} A -> {dns.rcode.to_text(m.rcode())} {ans}; "
                      f"{tb} tracebacks in the log")


class _Stream:
    def __init__(self, size: int, chunk: int = 1 << 16) -> None:
        self.size, self.chunk = size, chunk

    def __iter__(self) -> Any:
        block = b"x" * self.chunk
        for _ in range(self.size // self.chunk):
            yield block


def stream(tmp: Path) -> None:
    with HostileAPI() as api:
        api.watch_body = _Stream(64 << 20)
        c = Client.load(str(api.write_kubeconfig(tmp / "kc")), None)
        r = Reflector("s", c, "/apis/multicluster.x-k8s.io/v1beta1/serviceimports",
                      on_list=lambda i, d: None, on_event=lambda t, o: None)
        r.rv = "1"
        out: dict[str, Any] = {}

        def run() -> None:
            t0 = time.thread_time()
            try:
                out["ran well"] = r._watch()
            except Exception as e:  # noqa: BLE001 - reported
                out["error"] = f"{type(e).__name__}: {e}"
            out["cpu"] = time.thread_time() - t0

        t = threading.Thread(target=run)
        t.start()
        t.join()
        c.close()
        print(f"64 MiB newline-free watch: {out['cpu']:.2f} CPU s in the reflector thread; "
              f"ended with {out.get('error', 'no error')}, ran well: {out.get('ran well')}")


def huge_int() -> None:
    items = [{"metadata": {"name": n, "namespace": "shop"}, "spec": {"type": "ClusterSetIP", "ips": []}}
             for n in ("huge", "web")]
    text = json.dumps({"kind": "L", "items": items}).replace('"spec"', '"x": ' + "9" * 5000 + ', "spec"', 1)
    for name, typed in (("msgspec decoder", ServiceImport.SOURCE.decoder()), ("json", None)):
        got: list[Any] = []
        dropped: list[str] = []
        has_on_bad = "on_bad" in signature(decode_list).parameters  # not before the drop of bad items
        kw: dict[str, Any] = {"on_bad": dropped.append} if has_on_bad else {}
        try:
            decode_list([text.encode()], got.append, typed=typed, **kw)
            names = [g["metadata"]["name"] for g in got]
            print(f"5,000-digit integer in an unread field, {name}: items {names} decoded, "
                  f"{len(dropped)} dropped")
        except ValueError as e:
            print(f"5,000-digit integer in an unread field, {name}: the whole list refused ({str(e)[:50]})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=25.0)
    ap.add_argument("--only", default="junk,bad,stream,int")
    a = ap.parse_args()
    only = set(a.only.split(","))
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if "int" in only:
            huge_int()
        if "stream" in only:
            stream(tmp)
        if "bad" in only:
            bad_item(tmp)
        if "junk" in only:
            junk(a.seconds, tmp)


if __name__ == "__main__":
    main()
