"""CPU of each stage of a first load, in one thread, over a real API server's two lists.

The lists are fetched once as the server's reflectors ask for them (EndpointSlices with the
service-name label, ServiceImports, resourceVersion 0) from --kubeconfig, or read from
--es/--si files (a list's JSON body); then, --runs times in this process with the cyclic GC
off, the checkout --repo (this one by default) does each stage of its load path and the best
time of each is printed: decode (streamed, 64 KiB at a time; keeping only the declared
fields where the checkout can), prepare (parse, cut), Store.apply, records, Zone.stage, the
digest (work_out) and the swap into the zone. Comparing two checkouts:

    python bench/load_stages.py --kubeconfig K --save /tmp/lists --repo <before>
    python bench/load_stages.py --es /tmp/lists/es.json --si /tmp/lists/si.json --repo <after>
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

ES_PATH = "/apis/discovery.k8s.io/v1/endpointslices"
SI_PATH = "/apis/multicluster.x-k8s.io/v1beta1/serviceimports"
LABEL = "multicluster.kubernetes.io/service-name"
KINDS = {"es": "EndpointSlice", "si": "ServiceImport"}


def fetch(kubeconfig: str) -> dict[str, str]:
    """The two list bodies, as the reflectors' first lists ask for them."""
    from mcsdns.kube.client import Client

    client = Client.load(kubeconfig, None, timeout=(5.0, 60.0))
    out = {}
    for name, path, selector in (("es", ES_PATH, LABEL), ("si", SI_PATH, None)):
        resp = client.open("GET", path, {"limit": 500, "labelSelector": selector, "resourceVersion": "0"})
        out[name] = resp.data.decode()
        resp.release_conn()
    client.close()
    return out


def stages(texts: dict[str, str]) -> dict[str, float]:
    """Seconds of CPU of each stage, one load."""
    from mcsdns.data import fields
    from mcsdns.data.objects import MODELS
    from mcsdns.data.parsing import prepare
    from mcsdns.kube.listdecode import ListDecoder
    from mcsdns.server.pipeline import Pipeline
    from mcsdns.zone.journal import work_out
    from mcsdns.zone.leftout import LeftOut
    from mcsdns.zone.locality import OFF
    from mcsdns.zone.records import service_records

    took: dict[str, float] = {}

    def timed(name: str, start: float) -> None:
        took[name] = took.get(name, 0.0) + time.process_time() - start

    objs: list[Any] = []
    for name, text in texts.items():
        kind = KINDS[name]
        decoder = getattr(fields.Fields, "decoder", None)  # older checkouts: json alone
        scan = decoder(MODELS[kind].SOURCE) if decoder is not None else None
        items: list[Any] = []
        t = time.process_time()
        dec = ListDecoder(items.append, scan=scan) if scan is not None else ListDecoder(items.append)
        for i in range(0, len(text), 65536):
            dec.feed(text[i:i + 65536])
        dec.finish()
        timed("decode", t)
        t = time.process_time()
        for o in items:
            o["kind"] = kind
            prepare(o)
        timed("prepare", t)
        objs += items
    p = Pipeline()
    p.store._listeners.clear()  # the stages below, timed one by one
    t = time.process_time()
    p.store.apply(objs, [])
    timed("Store.apply", t)
    t = time.process_time()
    zone, store = p.zone.origin, p.store
    built = [(k, service_records(si, store.service(k)[1], zone, OFF, LeftOut()))
             for k, si in store.imports.items()]
    timed("records", t)
    t = time.process_time()
    staged = [p.zone.stage(k, names) for k, names in built]
    timed("Zone.stage", t)
    t = time.process_time()
    worked = [work_out(st.key, st.before, st.new, False) for st in staged]
    timed("digest (work_out)", t)
    t = time.process_time()
    p.publisher.swap(list(zip(staged, worked, strict=True)))
    timed("swap", t)
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kubeconfig", help="fetch the lists from this API server")
    ap.add_argument("--es", type=Path, help="an EndpointSlice list's JSON body")
    ap.add_argument("--si", type=Path, help="a ServiceImport list's JSON body")
    ap.add_argument("--save", type=Path, help="with --kubeconfig: keep the lists in this folder")
    ap.add_argument("--repo", type=Path, default=Path(__file__).resolve().parent.parent,
                    help="the checkout measured (its extensions built in place)")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    sys.path.insert(0, str(args.repo.resolve()))
    if args.kubeconfig:
        texts = fetch(args.kubeconfig)
        if args.save:
            args.save.mkdir(parents=True, exist_ok=True)
            for name, text in texts.items():
                (args.save / f"{name}.json").write_text(text)
    elif args.es and args.si:
        texts = {"es": args.es.read_text(), "si": args.si.read_text()}
    else:
        ap.error("--kubeconfig, or --es and --si")
    gc.disable()
    runs = [stages(texts) for _ in range(args.runs)]
    counts = {k: len(json.loads(t)["items"]) for k, t in texts.items()}
    print(f"{args.repo}: {counts['si']} ServiceImports, {counts['es']} EndpointSlices; "
          f"best of {args.runs}, ms CPU")
    for name in runs[0]:
        print(f"  {name:18s} {min(r[name] for r in runs) * 1000:7.1f}")
    print(f"  {'total':18s} {min(sum(r.values()) for r in runs) * 1000:7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
